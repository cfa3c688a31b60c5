#!/usr/bin/env python3
"""Turn mlperf_extracted.csv (output of extract_mlperf.py) into runs.csv rows.
stdlib only.  Usage: build_runs.py mlperf_extracted.csv runs.csv

Model shapes (documents read):
  GPT-3 175B: NVIDIA gpt3 conf/megatron_gpt_config_custom.yaml (num_layers 96,
    hidden_size 12288, num_attention_heads 96, ffn = 4*hidden); seq 2048 from
    the MLLOG max_sequence_length; vocab not stated (SentencePiece
    c4_en_301_5Mexp2_spm.model), so LM-head FLOPs are left out.
  Llama 2 70B: NVIDIA llama2_70b_lora conf/megatron_gpt_peft_tuning_config.yaml
    (80 layers, hidden 8192, 64 heads, 8 query groups, ffn 28672, seq 8192 =
    MAX_SEQLEN default); vocab 32000 (Llama 2 tokenizer) not stated in the
    submission -> LM head left out.
  Llama 3.1 405B / 8B: NVIDIA/NeMo nemo/collections/llm/gpt/model/llama.py
    (Llama31Config405B: 126 layers, 16384, 53248, 128 heads; Llama31Config8B:
    32, 4096, 14336, 32 heads; Llama3Config num_query_groups 8); seq 8192 from
    MLLOG. 405B uses the Mixtral-8x22B tokenizer (submission README), vocab
    32768 (not in the submission: left empty, head left out); 8B uses the
    Llama-3.1-8B tokenizer (README) - vocab also left empty and head left out.
FLOPs per token (model FLOPs, recompute not counted, causal attention):
  dense pretraining: 6*N_lin + 6*L*s*h ; LoRA (frozen base): 4*N_lin + 6*L*s*h
  N_lin = L*(h*(h + 2*kv*hd) + h*h + (3 if gated else 2)*h*ffn), hd = h/heads.
tflops_per_gpu = FLOPs/token * tokens_per_s_per_gpu / 1e12;
mfu_pct = tflops_per_gpu / bf16 dense peak (hardware.csv; empty where absent).
"""
import csv, sys, statistics

MODELS = {
    "gpt3": dict(model="GPT-3 175B (MLPerf)", params_b=175, layers=96, hidden=12288, heads=96, kv=96,
                 ffn=49152, gated=False, vocab="", lora=0),
    "llama2_70b_lora": dict(model="Llama 2 70B LoRA (MLPerf, GovReport)", params_b=70, layers=80, hidden=8192,
                            heads=64, kv=8, ffn=28672, gated=True, vocab="", lora=1),
    "llama31_405b": dict(model="Llama 3.1 405B (MLPerf pretraining, C4)", params_b=405, layers=126, hidden=16384,
                         heads=128, kv=8, ffn=53248, gated=True, vocab="", lora=0),
    "llama31_8b": dict(model="Llama 3.1 8B (MLPerf pretraining, C4)", params_b=8, layers=32, hidden=4096,
                       heads=32, kv=8, ffn=14336, gated=True, vocab="", lora=0),
}
# bf16 dense peak TFLOP/s, only values present in ../hardware.csv
PEAK = {"H100-SXM5-80GB": 989.4, "H200-SXM-141GB": 989.4, "B200": 2250, "GB200": 2500,
        "A100-SXM4-80GB": 312}


def gpu_name(acc):
    a = acc.replace(" ", "")
    for k, v in (("GB300", "GB300"), ("B300", "B300"), ("GB200", "GB200"), ("B200", "B200"),
                 ("H200-NVL", "H200-NVL-141GB"), ("H200", "H200-SXM-141GB"), ("H100", "H100-SXM5-80GB"),
                 ("MI300X", "MI300X"), ("MI325X", "MI325X"), ("MI350X", "MI350X"), ("MI355X", "MI355X"),
                 ("L40S", "L40S"), ("A100", "A100-SXM4-80GB")):
        if k in a:
            return v
    return None


def truthy(v):
    return str(v).strip().lower() in ("true", "1", "yes")


def main():
    src, out = sys.argv[1], sys.argv[2]
    rows = [r for r in csv.DictReader(open(src)) if r.get("config_path")]
    groups = {}
    for r in rows:
        g = gpu_name(r["accelerator"])
        if not g:
            continue
        fp4 = truthy(r.get("fp4"))
        fp8 = truthy(r.get("fp8"))
        dtype = "fp4" if fp4 else ("fp8" if fp8 else ("bf16" if str(r.get("fp8")).lower() == "false" else ""))
        amb = r.get("ambiguous_configs", "")
        if amb and ("fp4" in amb) != ("fp4" in r["config_path"].split("/")[-1]) or (amb and "fp4" in amb and "fp4" in r["config_path"] and not all("fp4" in a for a in amb.split(";"))):
            dtype = ""  # candidate configs disagree on precision
        r["_gpu"], r["_dtype"] = g, dtype
        key = (r["round"], r["benchmark"], g, r["num_gpus"], r["tp"], r["pp"], r["cp"], r["micro_batch"], r["gbs"], dtype)
        groups.setdefault(key, []).append(r)
    outrows = []
    for key, rs in groups.items():
        rs.sort(key=lambda r: (r["submitter"] != "NVIDIA", bool(r.get("ambiguous_configs")), r["submitter"], r["system"]))
        r = rs[0]
        dtype = r["_dtype"]
        m = MODELS[r["benchmark"]]
        L, h, H, kv, f = m["layers"], m["hidden"], m["heads"], m["kv"], m["ffn"]
        hd = h // H
        s = int(float(r["seq"])) if r["seq"] else 8192
        nlin = L * (h * (h + 2 * kv * hd) + h * h + (3 if m["gated"] else 2) * h * f)
        fpt = (4 if m["lora"] else 6) * nlin + 6 * L * s * h
        n = int(r["num_gpus"])
        st = float(r["step_time_s"])
        gbs = int(r["gbs"])
        tps = gbs * s / st / n
        tfl = fpt * tps / 1e12
        peak = PEAK.get(r["_gpu"])
        mfu = round(100 * tfl / peak, 1) if peak else ""
        tp, pp, cp = int(r["tp"]), int(r["pp"]), int(r["cp"])
        dp = n // (tp * pp * cp)
        vpp = r["vpp"] if r["vpp"] not in ("", "null", "None", "1") else ("1" if pp == 1 else "")
        sp = r["seq_parallel"]
        sp = "1" if truthy(sp) else ("0" if sp not in ("",) else "")
        yrc = r.get("yaml_recompute", "")
        if "granularity=selective" in yrc:
            rec = "selective"
        elif yrc and all(x.split("=")[1] in ("null", "False", "20") for x in yrc.split("|")):
            rec = "none"
        else:
            rec = ""
        zero = "1" if truthy(r.get("dist_opt")) else ""
        others = "; ".join(f"{o['submitter']}/{o['system']}: {o['step_time_s']} s" for o in rs[1:])
        notes = [f"MLPerf Training {r['round']} closed division; system '{r['system_name']}' ({r['nodes']} nodes x {r['gpus_per_node']} GPUs)",
                 f"framework {r['framework']}",
                 f"dp derived = num_gpus/(tp*pp*cp); global batch from MLLOG global_batch_size; per-DP-rank batch MINIBS={r['minibs'] or 'n/a'}",
                 f"step time median over {r['n_files']} result files (range {r['step_time_min']}-{r['step_time_max']} s)"]
        if r.get("tracked_step_time_s"):
            notes.append(f"cross-check: median tracked_stats train_step_time = {r['tracked_step_time_s']} s")
        notes.append(f"FLOPs/token = {'4' if m['lora'] else '6'}*N_lin + 6*L*s*h (causal attention; no recompute; LM head/embedding excluded; N_lin={nlin/1e9:.2f}B) = {fpt/1e9:.1f} GFLOP")
        if r.get("model_tflop_per_sample"):
            notes.append(f"NVIDIA config MODEL_TFLOP_PER_SAMPLE={r['model_tflop_per_sample']} (their own FLOP count, different convention)")
        if m["lora"]:
            notes.append("LoRA fine-tuning: base weights frozen (forward + activation-gradient only), adapters r=16 per MLLOG lora_rank; tokens/sample taken as max_seq_len 8192 (GovReport inputs padded/packed to 8192: upper bound)")
        if zero:
            notes.append("zero_stage=1 means Megatron distributed optimizer (optimizer state sharded over DP)")
        if dtype == "fp8":
            notes.append("FP8 (Transformer Engine) GEMMs; mfu vs bf16 dense peak")
        if dtype == "fp4":
            notes.append("NVFP4 GEMMs (FP4=True in config); mfu vs bf16 dense peak")
        if dtype == "":
            notes.append("precision not determined: several candidate configs match (" + r.get("ambiguous_configs", "") + ")")
        elif r.get("ambiguous_configs"):
            notes.append("several configs of this submitter match GPU count and batch; chosen " + r["config_path"].split("/")[-1] + " (same parallel layout)")
        if not peak:
            notes.append("mfu empty: no peak for this GPU in hardware.csv")
        if rec == "":
            notes.append("recompute setting not found in config/yaml")
        if others:
            notes.append("same configuration also submitted by: " + others)
        interconnect = f"{r['accel_interconnect']}; scale-out: {r['host_networking']}".strip("; ")
        outrows.append(dict(
            source=f"MLPerf Training {r['round']} {r['submitter']} {r['system']}",
            model=m["model"], arch="dense", params_b=m["params_b"], layers=L, hidden=h, heads=H, ffn_hidden=f,
            seq_len=s, vocab=m["vocab"], experts=1, topk=1, gpu=r["_gpu"], num_gpus=n, tp=tp, pp=pp, dp=dp, cp=cp,
            ep=1, vpp=vpp, zero_stage=zero, micro_batch=r["micro_batch"], global_batch=gbs, recompute=rec,
            tflops_per_gpu=round(tfl, 1), mfu_pct=mfu, notes="; ".join(notes), kv_heads=kv, dtype=dtype,
            sequence_parallel=sp, step_time_s=round(st, 4), tokens_per_s_per_gpu=round(tps, 1),
            measurement="mllog: median over result files of median over training segments (eval_stop(k-1)->eval_start(k), k>=1; "
                        "first segment with warm-up and all eval time excluded) of segment_seconds/(segment_samples/global_batch); extract_mlperf.py",
            lora=m["lora"],
            source_url_or_path=f"github.com/mlcommons/training_results_{r['round']}@{r['commit']}: {r['result_path']}/result_*.txt; {r['config_path']}; {r['submitter']}/systems/{r['system']}.json",
            interconnect=interconnect))
    cols = ["source", "model", "arch", "params_b", "layers", "hidden", "heads", "ffn_hidden", "seq_len", "vocab", "experts", "topk",
            "gpu", "num_gpus", "tp", "pp", "dp", "cp", "ep", "vpp", "zero_stage", "micro_batch", "global_batch", "recompute",
            "tflops_per_gpu", "mfu_pct", "notes", "kv_heads", "dtype", "sequence_parallel", "step_time_s", "tokens_per_s_per_gpu",
            "measurement", "lora", "source_url_or_path", "interconnect"]
    outrows.sort(key=lambda x: (x["model"], x["gpu"], int(x["num_gpus"]), x["source"]))
    with open(out, "w", newline="") as fo:
        w = csv.DictWriter(fo, fieldnames=cols, quoting=csv.QUOTE_MINIMAL)
        w.writeheader()
        w.writerows(outrows)
    print(len(outrows), "rows")


if __name__ == "__main__":
    main()
