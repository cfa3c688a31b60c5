#!/usr/bin/env python3
"""Extract per-step training throughput and parallel configuration from MLPerf
Training results repositories (stdlib only).

Input: a directory per round holding files copied verbatim (paths unchanged)
from the git snapshots of mlcommons/training_results_v{3.0,3.1,4.0,4.1,5.0,5.1}
(commits listed in ROUND_COMMITS):
  <submitter>/results/<system>/<benchmark>/result_*.txt
  <submitter>/benchmarks/<benchmark>/implementations/<impl>/config_*.sh (+ conf/*.yaml)
  <submitter>/systems/<system>.json
Usage: extract_mlperf.py ROOT OUT.csv   (ROOT holds v3.0/ v3.1/ ... subdirectories)

Step-time method (per result file):
  training segments are the intervals between eval_stop(k-1) and eval_start(k)
  (eval time excluded); samples trained in segment k are the difference of the
  sample/token position logged in eval_start metadata (samples_count, or
  epoch_num for GPT-3 where the unit is tokens, divided by the logged
  max_sequence_length). Segment 0 (from run_start; contains warm-up/JIT/graph
  capture) is dropped. step_time = segment_seconds / (segment_samples / gbs);
  the file value is the median over segments 1..last; the system value is the
  median over result files. Logs with no eval_start events fall back to
  block_start/block_stop pairs (block samples from metadata epoch_count or the
  next block's samples_count), also dropping the first block.
  The median of tracked_stats train_step_time(ing) (first 3 steps dropped) is
  reported as a cross-check where the log has it.
Config: each config_*.sh of the submitter's implementation(s) of the benchmark
  is evaluated with a tiny sequential interpreter of export/default assignments
  and `source` of sibling files (if/fi blocks are skipped); the config whose
  DGXNNODES*DGXNGPU equals the system's GPU count and whose
  MINIBS*N/(TP*PP*CP) equals the logged global_batch_size is chosen; NeMo yaml
  defaults of the form ${oc.env:VAR,default} fill unset values.
"""
import csv, glob, json, os, re, statistics, sys

ROUND_COMMITS = {
    "v3.0": "63e326c400f5d8bb8c6070a9ab08332d4931152e",
    "v3.1": "d06288b2bd675a9d88e0e6181f5bb5626b71ec19",
    "v4.0": "6fe954378efe4a1a1bd665550b18ff8f26018def",
    "v4.1": "b87b9e396f771345d4ef122ba33456304f15228d",
    "v5.0": "0fdc28f013256aea84fa36fdaf1e0fa46094b18c",
    "v5.1": "441d65f4445cd59687466533fd9f55399136e7a4",
}
BENCHES = ("gpt3", "llama2_70b_lora", "llama31_405b", "llama31_8b")
RX = re.compile(r':::MLLOG (\{.*\})')


def events(fp):
    ev, seen = [], set()
    with open(fp, errors="replace") as f:
        for line in f:
            m = RX.search(line)
            if not m:
                continue
            try:
                e = json.loads(m.group(1))
            except ValueError:
                continue
            k = (e.get("key"), e.get("time_ms"), json.dumps(e.get("metadata"), sort_keys=True))
            if k in seen:
                continue
            seen.add(k)
            ev.append(e)
    ev.sort(key=lambda e: e["time_ms"])
    return ev


def first(ev, key):
    for e in ev:
        if e["key"] == key:
            return e["value"]
    return None


def pos_of(e):
    md = e.get("metadata") or {}
    for k in ("samples_count", "epoch_num"):
        if md.get(k) is not None:
            return float(md[k])
    return None


def file_step_time(fp, bench):
    ev = events(fp)
    gbs = first(ev, "global_batch_size")
    seq = first(ev, "max_sequence_length")
    if not gbs:
        return None
    unit = float(seq) if (bench == "gpt3" and seq) else 1.0  # gpt3 counts tokens
    segs = []
    evs = [e for e in ev if e["key"] in ("run_start", "eval_start", "eval_stop")]
    last_stop_t, last_pos = None, 0.0
    for e in evs:
        if e["key"] == "run_start":
            last_stop_t = e["time_ms"]
        elif e["key"] == "eval_start":
            p = pos_of(e)
            if p is None or last_stop_t is None:
                continue
            segs.append(((e["time_ms"] - last_stop_t) / 1000.0, (p - last_pos) / unit))
            last_pos = p
            last_stop_t = None
        elif e["key"] == "eval_stop":
            last_stop_t = e["time_ms"]
    method = "eval-gaps"
    if len(segs) < 2:
        # fallback: block_start/block_stop pairs
        segs, method = [], "blocks"
        bs = [e for e in ev if e["key"] in ("block_start", "block_stop")]
        cur = None
        starts = []
        for e in bs:
            if e["key"] == "block_start":
                cur = e
            elif cur is not None:
                md = cur.get("metadata") or {}
                starts.append((cur["time_ms"], e["time_ms"], md))
                cur = None
        for i, (t0, t1, md) in enumerate(starts):
            if md.get("epoch_count") is not None:
                n = float(md["epoch_count"]) / unit
            elif i + 1 < len(starts) and starts[i + 1][2].get("samples_count") is not None and md.get("samples_count") is not None:
                n = float(starts[i + 1][2]["samples_count"]) - float(md["samples_count"])
            else:
                continue
            segs.append(((t1 - t0) / 1000.0, n))
    use = [(d, n) for d, n in segs[1:] if n > 0 and d > 0]
    if not use:
        return None
    st = statistics.median(d / (n / float(gbs)) for d, n in use)
    ts = []
    for e in ev:
        if e["key"] == "tracked_stats" and isinstance(e["value"], dict):
            for k in ("train_step_time", "train_step_timing", "train_step_timing in s"):
                if k in e["value"]:
                    ts.append(float(e["value"][k]))
    ts_med = statistics.median(ts[3:]) if len(ts) > 5 else None
    return dict(step=st, gbs=int(gbs), seq=seq, nseg=len(use), method=method, ts=ts_med,
                samples=sum(n for _, n in use))


# ---------- config evaluation ----------
ASSIGN = re.compile(r'^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$')
DEFAULT = re.compile(r'^\s*:\s*"?\$\{([A-Za-z_][A-Za-z0-9_]*):?[=-]([^}]*)\}"?')
SOURCE = re.compile(r'^\s*(?:source|\.)\s+(.+?)\s*$')


def expand(val, env):
    val = val.strip()
    val = re.split(r'\s+#', val)[0].strip().rstrip(';')
    if len(val) >= 2 and val[0] == val[-1] and val[0] in "\"'":
        val = val[1:-1]
    m = re.fullmatch(r'\$\{([A-Za-z_][A-Za-z0-9_]*):?([=-])([^}]*)\}', val)
    if m:
        name, op, d = m.groups()
        if name in env and env[name] != "":
            return env[name], None
        return expand(d, env)[0], (name if op == "=" else None)
    def sub(mm):
        return env.get(mm.group(1) or mm.group(2), "")
    if "$(" in val:
        return val, None
    return re.sub(r'\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)', sub, val), None


def run_config(path, env, depth=0):
    if depth > 5 or not os.path.exists(path):
        return
    d = os.path.dirname(path)
    level = 0
    for raw in open(path, errors="replace"):
        line = raw.split("#")[0] if raw.lstrip().startswith("#") else raw
        s = line.strip()
        if not s:
            continue
        if re.match(r'^(if|case)\b', s):
            level += 1
            continue
        if re.match(r'^(fi|esac)\b', s):
            level = max(0, level - 1)
            continue
        if level:
            continue
        m = SOURCE.match(s)
        if m:
            tgt = m.group(1).split()[0].strip('"') if "$(" not in m.group(1) else m.group(1).strip('"')
            tgt = re.sub(r'\$\(dirname \$\{BASH_SOURCE\[0\]\}\)', d, tgt)
            tgt = tgt.replace("${SCRIPT_DIR}", d)
            if not os.path.isabs(tgt):
                tgt = os.path.join(d, os.path.basename(tgt))
            run_config(tgt, env, depth + 1)
            continue
        m = DEFAULT.match(s)
        if m:
            if m.group(1) not in env:
                env[m.group(1)] = expand(m.group(2), env)[0]
            continue
        m = ASSIGN.match(s)
        if m:
            name, val = m.groups()
            v, alias = expand(val, env)
            env[name] = v
            if alias:
                env[alias] = v


def yaml_defaults(impl_dir):
    out = {}
    for y in sorted(glob.glob(os.path.join(impl_dir, "conf", "*.yaml"))):
        for line in open(y, errors="replace"):
            m = re.match(r'^\s*([A-Za-z_0-9]+):\s*(.+?)\s*(#.*)?$', line)
            if not m:
                continue
            k, v = m.group(1), m.group(2)
            out.setdefault(k, v)
    return out


def resolve_yaml(v, env):
    def rep(mm):
        name, d = mm.group(1), mm.group(2)
        return env.get(name, d if d is not None else "")
    for _ in range(4):
        v2 = re.sub(r'\$\{oc\.env:([A-Za-z_0-9]+)(?:,([^{}]*))?\}', rep, v)
        v2 = re.sub(r'\$\{oc\.decode:([^{}]*)\}', r'\1', v2)
        if v2 == v:
            break
        v = v2
    return v.strip().strip("'\"")


def geti(env, *names):
    for n in names:
        v = env.get(n)
        if v not in (None, "", "null", "None"):
            try:
                return int(float(v))
            except ValueError:
                pass
    return None


def configs_for(root, sub, bench):
    out = []
    for c in sorted(glob.glob(os.path.join(root, sub, "benchmarks", bench, "implementations", "*", "config_*.sh"))):
        b = os.path.basename(c)
        if re.match(r'config_(common|mounts|fp8|fp4)', b) or "common" in b:
            continue
        env = {}
        run_config(c, env)
        nn, ng = geti(env, "DGXNNODES"), geti(env, "DGXNGPU")
        fm = re.match(r'config_[A-Za-z0-9-]+?_(\d+)x(\d+)x', b)
        if fm:  # node/GPU counts are also encoded in NVIDIA-style config names
            nn = nn or int(fm.group(1))
            ng = ng or int(fm.group(2))
        tp = geti(env, "TENSOR_MODEL_PARALLEL", "TP") or 1
        pp = geti(env, "PIPELINE_MODEL_PARALLEL", "PP") or 1
        cp = geti(env, "CONTEXT_PARALLEL", "CP") or 1
        nn = nn or geti(env, "NNODES")
        ng = ng or geti(env, "GPUS_PER_NODE")
        mini = geti(env, "MINIBS", "BATCHSIZE")
        gbs_cfg = geti(env, "GBS", "GLOBAL_BATCH_SIZE")
        out.append(dict(path=c, env=env, nn=nn, ng=ng, tp=tp, pp=pp, cp=cp, minibs=mini, gbs_cfg=gbs_cfg))
    return out


def main():
    root, outp = sys.argv[1], sys.argv[2]
    rows = []
    for rnd in sorted(ROUND_COMMITS):
        R = os.path.join(root, rnd)
        for rd in sorted(glob.glob(os.path.join(R, "*", "results", "*", "*"))):
            sub, _, system, bench = rd[len(R) + 1:].split("/")
            if bench not in BENCHES:
                continue
            per = []
            for fp in sorted(glob.glob(os.path.join(rd, "result_*.txt"))):
                r = file_step_time(fp, bench)
                if r:
                    per.append(r)
            if not per:
                continue
            sj = os.path.join(R, sub, "systems", system + ".json")
            sysd = json.load(open(sj)) if os.path.exists(sj) else {}
            try:
                ngpu = int(sysd.get("number_of_nodes")) * int(sysd.get("accelerators_per_node"))
            except (TypeError, ValueError):
                ngpu = None
            gbs = per[0]["gbs"]
            # choose config
            cands = configs_for(R, sub, bench)
            match, why = [], ""
            for c in cands:
                if c["nn"] and c["ng"] and ngpu and c["nn"] * c["ng"] == ngpu:
                    n = ngpu
                    dp = n // (c["tp"] * c["pp"] * c["cp"]) if n % (c["tp"] * c["pp"] * c["cp"]) == 0 else None
                    c["dp"] = dp
                    c["gbs_ok"] = bool(dp and ((c["minibs"] and dp * c["minibs"] == gbs) or
                                               (not c["minibs"] and c["gbs_cfg"] == gbs)))
                    match.append(c)
            good = [c for c in match if c["gbs_ok"]]
            acc = sysd.get("accelerator_model_name", "")
            tok = next((t for t in ("GB300", "GB200", "B300", "B200", "H200", "H100", "MI300X", "MI325X",
                                    "MI350X", "MI355X", "A100", "L40S") if t in acc.replace("-", "")), None)
            def score(c):
                sc = 2 if os.path.basename(os.path.dirname(c["path"])) == system else 0
                b = os.path.basename(c["path"]).upper()
                if tok and re.search(r'(?<![G])' + tok if tok in ("B200", "B300") else tok, b):
                    sc += 1
                return sc
            best = max((score(c) for c in good), default=0)
            top = [c for c in good if score(c) == best]
            pick = top[0] if top else None
            nm = len(good)
            ambiguous = ";".join(os.path.basename(c["path"]) for c in top) if len(top) > 1 else ""
            rec = dict(round=rnd, commit=ROUND_COMMITS[rnd], submitter=sub, system=system, benchmark=bench,
                       system_name=sysd.get("system_name", ""),
                       accelerator=sysd.get("accelerator_model_name", ""),
                       nodes=sysd.get("number_of_nodes", ""), gpus_per_node=sysd.get("accelerators_per_node", ""),
                       num_gpus=ngpu or "", accel_interconnect=sysd.get("accelerator_interconnect", ""),
                       host_networking=sysd.get("host_networking", ""), framework=sysd.get("framework", ""),
                       gbs=gbs, seq=per[0]["seq"] or "", n_files=len(per),
                       step_time_s=round(statistics.median(p["step"] for p in per), 4),
                       step_time_min=round(min(p["step"] for p in per), 4),
                       step_time_max=round(max(p["step"] for p in per), 4),
                       tracked_step_time_s=(round(statistics.median(p["ts"] for p in per if p["ts"]), 4)
                                            if any(p["ts"] for p in per) else ""),
                       method=per[0]["method"], segments_per_file=statistics.median(p["nseg"] for p in per),
                       result_path=os.path.relpath(rd, R), n_config_matches=nm,
                       ambiguous_configs=ambiguous)
            if pick:
                env = pick["env"]
                yd = yaml_defaults(os.path.dirname(pick["path"]))
                def yv(k):
                    return resolve_yaml(yd[k], env) if k in yd else ""
                rec.update(config_path=os.path.relpath(pick["path"], R), tp=pick["tp"], pp=pick["pp"], cp=pick["cp"],
                           dp=pick["dp"], minibs=pick["minibs"],
                           micro_batch=env.get("MICRO_BATCH_SIZE", env.get("MBS", "")) or yv("micro_batch_size"),
                           vpp=env.get("INTERLEAVED_PIPELINE", "") or yv("virtual_pipeline_model_parallel_size"),
                           seq_parallel=env.get("SEQ_PARALLEL", env.get("SP", "")) or yv("sequence_parallel"),
                           fp8=env.get("FP8", "") or yv("fp8"), fp4=env.get("FP4", ""),
                           fp8_dpa=env.get("FP8_DPA", "") ,
                           recompute="|".join(f"{k}={env[k]}" for k in sorted(env) if re.search(r'RECOMPUTE|ACT_CKPT|CKPT_NUM|CPU_OFFLOAD|ACTIVATION', k)),
                           yaml_recompute="|".join(f"{k}={yv(k)}" for k in ("activations_checkpoint_granularity", "activations_checkpoint_method", "activations_checkpoint_num_layers", "recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_modules", "cpu_offloading", "cpu_offloading_num_layers") if k in yd),
                           lora_r=env.get("LORA_R", "") or yv("adapter_dim"),
                           model_tflop_per_sample=env.get("MODEL_TFLOP_PER_SAMPLE", ""),
                           num_layers=env.get("OVERWRITTEN_NUM_LAYERS", "") or yv("num_layers"),
                           hidden=yv("hidden_size"), ffn=yv("ffn_hidden_size"), heads=yv("num_attention_heads"),
                           kv_groups=yv("num_query_groups"), dist_opt=env.get("USE_DIST_OPTIMIZER", ""))
            rows.append(rec)
    keys = []
    for r in rows:
        for k in r:
            if k not in keys:
                keys.append(k)
    with open(outp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    print(len(rows), "rows")


if __name__ == "__main__":
    main()
