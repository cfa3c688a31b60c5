#!/usr/bin/env python3
"""Rows transcribed from yanring/Megatron-MoE-ModelZoo best_practice/Qwen3/readme.md
@c1ad0b5c89f425d60febddc38e7f741a16f08bd1 (tables 'Performance Results' and 'Long Context'),
model shape from model_configs/benchmarking/Qwen3-235B-A22B.yaml @30631ea5a4aa6a5328be4e81466ac0d7e9fc438f.
Prints CSV rows (no header) in runs.csv column order."""
import csv, sys
SRC = "github.com/yanring/Megatron-MoE-ModelZoo@c1ad0b5c89f425d60febddc38e7f741a16f08bd1: best_practice/Qwen3/readme.md; model: model_configs/benchmarking/Qwen3-235B-A22B.yaml@30631ea5a4aa6a5328be4e81466ac0d7e9fc438f"
IC = "NVLink 4th gen (8 GPUs/node); InfiniBand 8x50 GB/s per node (readme 'Experiment Setup')"
BASE = dict(model="Qwen3-235B-A22B", arch="moe", params_b=235, layers=94, hidden=4096, heads=64, ffn_hidden=1536,
            vocab="", experts=128, topk=8, gpu="H100-SXM5-80GB", kv_heads=4, dtype="bf16", sequence_parallel=1,
            lora=0, interconnect=IC, zero_stage=1, ep=None)
# (dispatcher, gpus, seq, tp, cp, ep, pp, edp, etp, vpp, dp, fsdp, mbs, gbs, ga, recompute, step_s, tf, note)
MAIN = [
    ("DeepEP", 256, 4096, 2, 1, 32, 8, 1, 1, 4, 16, "", 1, 2048, 128, "selective (norm, act)", 19.7, 245, "cross-node EP"),
    ("DeepEP", 256, 4096, 2, 1, 32, 8, 1, 1, 4, 16, "", 1, 2048, 128, "selective (norm, act)", 17.6, 276, "cross-node EP; +1F1B A2A overlap"),
    ("DeepEP", 256, 4096, 2, 1, 8, 1, 32, 1, 1, 128, "On", 4, 2048, 4, "full", 17.6, 276, "intra-node EP; FSDP on; 'disable log para norm'"),
    ("A2A", 256, 4096, 2, 1, 8, 32, 1, 1, 3, 4, "", 1, 2048, 512, "selective (norm, act)", 24.2, 200, "intra-node EP; all-to-all dispatcher"),
    ("DeepEP", 256, 4096, 4, 1, 8, 8, 4, 1, 4, 8, "", 1, 2048, 256, "none stated", 29.0, 167, "intra-node EP"),
]
LONG = [(16384, 4, 1, 295, 237), (32768, 4, 2, 335, 277), (65536, 4, 4, 368, 320), (131072, 4, 8, 389, 357)]
COLS = ["source", "model", "arch", "params_b", "layers", "hidden", "heads", "ffn_hidden", "seq_len", "vocab", "experts", "topk",
        "gpu", "num_gpus", "tp", "pp", "dp", "cp", "ep", "vpp", "zero_stage", "micro_batch", "global_batch", "recompute",
        "tflops_per_gpu", "mfu_pct", "notes", "kv_heads", "dtype", "sequence_parallel", "step_time_s", "tokens_per_s_per_gpu",
        "measurement", "lora", "source_url_or_path", "interconnect"]
w = csv.DictWriter(sys.stdout, fieldnames=COLS)
for (disp, n, s, tp, cp, ep, pp, edp, etp, vpp, dp, fsdp, mbs, gbs, ga, rc, st, tf, note) in MAIN:
    r = dict(BASE, source="Megatron-MoE-ModelZoo Qwen3 best practice (H100)", seq_len=s, num_gpus=n, tp=tp, pp=pp, dp=dp,
             cp=cp, ep=ep, vpp=vpp, micro_batch=mbs, global_batch=gbs, recompute=rc, tflops_per_gpu=tf,
             mfu_pct=round(100 * tf / 989.4, 1), step_time_s=st, tokens_per_s_per_gpu=round(gbs * s / st / n, 1),
             measurement="stated in readme table (Step time (sec), Per GPU TF); tokens/s/GPU derived = GBS*seq/step/GPUs; warm-up handling not stated",
             notes=f"dispatcher {disp}; EDP={edp} ETP={etp} GA={ga} (as stated); FSDP={fsdp or 'off'}; {note}; ffn_hidden is moe_ffn_hidden_size 1536 "
                   f"(dense ffn-hidden-size 12288 in yaml unused: all layers MoE), kv_channels 128, qk-layernorm; zero_stage=1 = Megatron distributed optimizer "
                   f"(--use-distributed-optimizer in yaml); 'Per GPU TF' FLOP convention not stated; mfu derived vs 989.4 bf16 peak; vocab: tokenizer Qwen/Qwen3-235B-A22B, size not stated")
    w.writerow(r)
for (s, tp, cp, tf_bal, tf_dropless) in LONG:
    n, pp, vpp, ep, gbs = 256, 8, 4, 8, 256
    r = dict(BASE, source="Megatron-MoE-ModelZoo Qwen3 best practice, long context (H100)", seq_len=s, num_gpus=n, tp=tp, pp=pp,
             dp=n // (tp * pp * cp), cp=cp, ep=ep, vpp=vpp, micro_batch="", global_batch=gbs,
             recompute="selective (layernorm, moe)", tflops_per_gpu=tf_bal, mfu_pct=round(100 * tf_bal / 989.4, 1),
             step_time_s="", tokens_per_s_per_gpu="",
             measurement="stated TFLOPS in readme 'Long Context' table (forced expert load balance); step time not given",
             notes=f"NNODES=32 (256 GPUs); PP=8 VPP=4 EP=8 from the readme command; dp derived = gpus/(tp*pp*cp); dropless routing gave {tf_dropless} TFLOPS "
                   f"(forced balance {tf_bal}); mbs not stated; DeepEP dispatcher; zero_stage=1 per yaml distributed optimizer; mfu derived vs 989.4")
    w.writerow(r)
