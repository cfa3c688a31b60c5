#!/usr/bin/env python3
"""Counts the collectives of a dtc bundle's program.mlir, for FileCheck.

  count_ops.py collectives PROGRAM.mlir
  count_ops.py gathers PROGRAM.mlir FUNC
  count_ops.py pipeline PROGRAM.mlir
  count_ops.py states PROGRAM.mlir FUNC
  count_ops.py schedule PROGRAM.mlir
  count_ops.py overlap PROGRAM.mlir FUNC [BUDGET]
  count_ops.py work PROGRAM.mlir
  count_ops.py unused PROGRAM.mlir FUNC

`overlap` counts, per kind of collective in FUNC, those with compute
between start and wait, and checks the prefetch and scatter rules; with
BUDGET it also says whether the gathers in flight at once (started, not
yet waited) stay within BUDGET elements.

Reads the printed MLIR text line by line (one op a line, as dtc writes it);
stdlib only. Element counts are of the full (unsharded) tensor a collective
moves: an all_reduce's operand, a reduce_scatter's operand, an all_gather's
result, a send's operand or a recv's result; an all_to_all's are one rank's
operand.

`collectives` prints, for each function (prefixed by its pipeline stage when
the file has several), one line per (collective, mesh axes):
  FUNC[PHASE] KIND over AXES: N ops, E elements, S scalar, D sources
PHASE is `all`, and, for a function with exactly one `dtc.forward_end` op,
also `fwd` (ops up to and including it) and `bwd` (the ops after it).
D is the number of distinct values the collectives read, traced back
through reshapes to a function argument (its dtc.state) or a
dtc.parameter (its name).

`gathers` prints, for each dtc.parameter of FUNC, how many all_gathers read
it before and after the forward_end, then a histogram of (fwd, bwd) pairs.

`pipeline` prints, per stage, the pipeline_step's send/recv counts by peer
offset, its order of forwards (F) and backwards (B) and the largest number
of micro-batches in flight (forwards minus backwards so far). A stage sees
a forward as its send to the next stage (stage 0) or its recv from the
previous one (other stages), and a backward as its recv from the next stage
(stage 0) or its send to the previous one (other stages). Stage 0 runs one
micro-batch's pass at a time, so counting a forward at its end and a
backward at its start gives the same peak as at their starts and ends.

`states` prints, for FUNC, the number and total elements of its state
arguments by dtc.state_role (grad, exp_avg, exp_avg_sq) and of its
dtc.parameter ops, as stored per rank.

`work` prints the compute of one micro-batch's forward and backward: for
`micro_step`, its matmuls and the ops recompute cloned (`dtc.recomputed`);
for a pipeline, the same summed over every stage's `pipeline_step` and
divided by its micro-batch count (the first dimension of its tokens).

A pipeline stage's `pipeline_step` holds no code: its `dtc.pipeline`
attribute names the chunk functions and `dtc.schedule` lists the passes in
the compiled order ("F2.1": the forward of micro-batch 1 through model
chunk 2). Every command reads it written out as the executor runs it: per
pass, the receives it waits for (posted one pass ahead with `overlap`),
its chunk function's ops (values renamed per run) and its sends; then the
waits for the sends and `pipeline_loss`. The chunk functions and
`pipeline_loss` themselves are then not listed.

Every command prints a `begin` and an `end` line around its output, so that
FileCheck's CHECK-NEXT can pin the whole output.
"""
import copy

import collections
import re
import sys

COLLECTIVES = ("all_reduce_start", "reduce_scatter_start", "all_gather_start",
               "all_to_all_start", "send_start", "recv_start")

FUNC_RE = re.compile(r"^\s*func\.func @(\w+)\((.*)\)(?: -> | attributes |\s*\{)")
ARG_RE = re.compile(r"%arg(\d+): tensor<([^>]*)>(?: \{([^}]*)\})?")
RETURN_RE = re.compile(r"^\s*(?:func\.)?return\s+(.*?)\s*:")
SCHEDULE_RE = re.compile(r"dtc\.schedule = \[([^\]]*)\]")
ROLE_RE = re.compile(r'dtc\.state_role = "([^"]*)"')
STATE_RE = re.compile(r'dtc\.state = "([^"]*)"')
OP_RE = re.compile(r"^\s*(?:(%[\w:, %]+?)\s*=\s*)?dtc\.(\w+)\b(.*)$")
VALUE_RE = re.compile(r"%[\w]+")
TENSOR_RE = re.compile(r"tensor<([^>]*)>")
AXES_RE = re.compile(r"mesh_axes = \[([^\]]*)\]")
PEER_RE = re.compile(r"peer_offset = (-?\d+)")
PARAM_RE = re.compile(r'dtc\.parameter "([^"]*)"')
STAGE_RE = re.compile(r"^// pipeline stage (\d+)")


def elements(shape):
    """Elements of a tensor<...> body such as `2x32x64xf32` or `f32`."""
    n = 1
    for dim in shape.split("x")[:-1]:
        n *= int(dim)
    return n


class Op:
    def __init__(self, results, name, rest):
        self.results = results
        self.name = name
        # Operands come before the attribute dict and the type.
        head = re.split(r"\{| : ", rest, maxsplit=1)[0]
        self.operands = VALUE_RE.findall(head)
        self.forward_end = "dtc.forward_end" in rest
        self.recomputed = "dtc.recomputed" in rest
        axes = AXES_RE.search(rest)
        self.axes = axes.group(1).replace('"', "") if axes else None
        peer = PEER_RE.search(rest)
        self.peer = int(peer.group(1)) if peer else None
        param = PARAM_RE.search("dtc." + name + rest)
        self.param = param.group(1) if name == "parameter" and param else None
        types = rest.rsplit(" : ", 1)[-1]
        tensors = TENSOR_RE.findall(types)
        # `A -> !dtc.async<B>`: first is the input, last the result.
        self.in_elems = elements(tensors[0]) if tensors else 0
        self.out_elems = elements(tensors[-1]) if tensors else 0
        self.scalar = bool(tensors) and tensors[0] in ("f32", "bf16", "f16")

    def moved(self):
        if self.name == "all_gather_start":
            return self.out_elems
        return self.in_elems


class Func:
    def __init__(self, stage, name, header):
        self.stage = stage
        self.name = name
        self.args = {}
        self.roles = collections.OrderedDict()
        for num, shape, attrs in ARG_RE.findall(header):
            state = STATE_RE.search(attrs)
            self.args["%arg" + num] = state.group(1) if state else "arg" + num
            role = ROLE_RE.search(attrs)
            if role:
                count = self.roles.setdefault(role.group(1), [0, 0])
                count[0] += 1
                count[1] += elements(shape)
        self.arglist = [("%arg" + num, shape, bool(STATE_RE.search(attrs)))
                        for num, shape, attrs in ARG_RE.findall(header)]
        self.returns = []
        self.pipeline, self.schedule = None, []
        self.ops = []
        self.defs = {}
        shapes = ARG_RE.findall(header)
        # A pipeline_step's micro-batches: tokens are [m, rows, seq].
        self.micro = 1
        if name == "pipeline_step" and shapes:
            self.micro = int(shapes[0][1].split("x")[0])

    def label(self, multi_stage):
        if multi_stage and self.stage is not None:
            return "stage%d.%s" % (self.stage, self.name)
        return self.name

    def add(self, op):
        self.ops.append(op)
        if op.results:
            for r in VALUE_RE.findall(op.results):
                self.defs[r] = op

    def source(self, value):
        """What `value` is, looking through reshapes and waits."""
        while True:
            if value in self.args:
                return "state:" + self.args[value]
            op = self.defs.get(value)
            if op is None:
                return "?" + value
            if op.param is not None:
                return "param:" + op.param
            if op.name in ("reshape", "wait") and op.operands:
                value = op.operands[0]
                continue
            return "op:%s:%s" % (op.name, value)

    def phases(self):
        ends = [i for i, op in enumerate(self.ops) if op.forward_end]
        yield "all", self.ops
        if len(ends) == 1:
            yield "fwd", self.ops[:ends[0] + 1]
            yield "bwd", self.ops[ends[0] + 1:]


def pipeline_attr(header):
    """The `dtc.pipeline` dictionary of a func line, or None."""
    start = header.find("dtc.pipeline = {")
    if start < 0:
        return None
    depth, end = 0, start
    for end in range(header.index("{", start), len(header)):
        depth += {"{": 1, "}": -1}.get(header[end], 0)
        if depth == 0:
            break
    text = header[start:end + 1]

    def integer(key, default=0):
        m = re.search(r"\b%s = (\d+)" % key, text)
        return int(m.group(1)) if m else default
    chunks = []
    for body in re.findall(r"\{(backward = [^{}]*)\}", text):
        backward = re.search(r'backward = "(\w+)"', body).group(1)
        forward = re.search(r'forward = "(\w+)"', body)
        chunks.append((forward.group(1) if forward else None, backward))
    return {"stages": integer("stages"), "stage": integer("stage"),
            "vpp": integer("virtual_stages", 1),
            "micro": integer("micro_batches", 1),
            "overlap": "overlap = true" in text,
            "axis": re.search(r'axis = "(\w+)"', text).group(1),
            "loss": re.search(r'loss = "(\w+)"', text).group(1),
            "chunks": chunks}


def synthetic(name, results, operands, axes, peer, elems):
    op = Op.__new__(Op)
    op.results, op.name, op.operands = results, name, operands
    op.forward_end = op.recomputed = op.scalar = False
    op.axes, op.peer, op.param = axes, peer, None
    op.in_elems = op.out_elems = elems
    return op


def expand_pipelines(funcs):
    """Replaces each stage's pipeline_step, chunk functions and
    pipeline_loss by the step written out (see the module doc)."""
    out, hidden = [], set()
    for step in funcs:
        p = step.pipeline
        if p is None:
            continue
        named = {f.name: f for f in funcs if f.stage == step.stage}
        # Each stage's pipeline attribute and functions, by stage index: a
        # message is sized by the pass that reads it, maybe on another one.
        steps = {f.pipeline["stage"]: f for f in funcs if f.pipeline}
        stages, stage = p["stages"], p["stage"]
        chunks = stages * p["vpp"]
        whole = Func(step.stage, step.name, "")
        whole.micro = max(int(m) for _, _, m in step.schedule) + 1
        runs = [0]
        handles = [0]

        def run(fn):
            runs[0] += 1
            prefix = "%%r%d_" % runs[0]

            def rename(v):
                return prefix + v[1:]
            for name, _, state in fn.arglist:
                whole.args[rename(name)] = (fn.args.get(name, name[1:])
                                            if state else rename(name)[1:])
            for op in fn.ops:
                new = copy.copy(op)
                new.results = (re.sub(r"%(\w+)", lambda m: prefix + m.group(1),
                                      op.results) if op.results else op.results)
                new.operands = [rename(v) for v in op.operands]
                whole.add(new)
            return [rename(v) for v in fn.returns]

        def owner(c):
            return c % stages

        def reader(kind, c):
            there = steps[owner(c)]
            forward, backward = there.pipeline["chunks"][c // stages]
            fn = {f.name: f for f in funcs
                  if f.stage == there.stage}[forward if kind == "A" and
                                             c != chunks - 1 else backward]
            data = [a for a in fn.arglist if not a[2]]
            return elements(data[0 if kind == "A" else -1][1])

        def traffic(kind, c, m):
            """(messages in, messages out) of a pass: (kind, chunk, micro,
            peer offset)."""
            first, last = c == 0, c == chunks - 1
            ins, outs = [], []
            if kind == "F" and not last:
                if not first:
                    ins.append(("A", c, m, owner(c - 1) - stage))
                outs.append(("A", c + 1, m, owner(c + 1) - stage))
            elif kind == "B":
                if last and not first:
                    ins.append(("A", c, m, owner(c - 1) - stage))
                if not last:
                    ins.append(("G", c, m, owner(c + 1) - stage))
                if not first:
                    outs.append(("G", c - 1, m, owner(c - 1) - stage))
            return ins, outs

        posted, sends = {}, []

        def post(msg):
            if msg[:3] in posted:
                return
            handles[0] += 1
            handle = "%%p%d" % handles[0]
            posted[msg[:3]] = handle
            whole.add(synthetic("recv_start", handle, [], p["axis"], msg[3],
                                reader(msg[0], msg[1])))

        passes = [(k, int(c), int(m)) for k, c, m in step.schedule
                  if not (k == "F" and int(c) == chunks - 1)]
        for i, (kind, c, m) in enumerate(passes):
            ins, outs = traffic(kind, c, m)
            for msg in ins:
                post(msg)
                handles[0] += 1
                whole.add(synthetic("wait", "%%p%d" % handles[0],
                                    [posted[msg[:3]]], None, None, 0))
            if p["overlap"] and i + 1 < len(passes):
                for msg in traffic(*passes[i + 1])[0]:
                    post(msg)
            forward, backward = p["chunks"][c // stages]
            fn = named[forward if kind == "F" else backward]
            hidden.add(fn.name)
            results = run(fn)
            for msg in outs:
                # A forward sends its output, a backward its input's
                # gradient (after the loss on the last chunk).
                value = results[1 if kind == "B" and c == chunks - 1 else 0]
                handles[0] += 1
                handle = "%%p%d" % handles[0]
                sends.append(handle)
                whole.add(synthetic("send_start", handle, [value], p["axis"],
                                    msg[3], reader(msg[0], msg[1])))
        for handle in sends:
            handles[0] += 1
            whole.add(synthetic("wait", "%%p%d" % handles[0], [handle], None,
                                None, 0))
        run(named[p["loss"]])
        hidden.add(p["loss"])
        out.append((step, whole))
    replaced = dict(out)
    return [replaced.get(f, f) for f in funcs if f.name not in hidden]


def parse(path):
    funcs = []
    stage = None
    current = None
    with open(path) as f:
        for line in f:
            m = STAGE_RE.match(line)
            if m:
                stage = int(m.group(1))
                continue
            m = FUNC_RE.match(line)
            if m:
                current = Func(stage, m.group(1), m.group(2))
                current.pipeline = pipeline_attr(line)
                schedule = SCHEDULE_RE.search(line)
                if schedule:
                    current.schedule = re.findall(r'"([FB])(\d+)\.(\d+)"',
                                                  schedule.group(1))
                funcs.append(current)
                continue
            if current is None:
                continue
            m = OP_RE.match(line)
            if m:
                current.add(Op(m.group(1), m.group(2), m.group(3)))
                continue
            m = RETURN_RE.match(line)
            if m:
                current.returns = VALUE_RE.findall(m.group(1))
    return expand_pipelines(funcs)


def collectives(funcs):
    multi = len({f.stage for f in funcs}) > 1
    for func in funcs:
        for phase, ops in func.phases():
            groups = collections.OrderedDict()
            for op in ops:
                if op.name in COLLECTIVES:
                    key = (op.name[:-len("_start")], op.axes)
                    groups.setdefault(key, []).append(op)
            for (kind, axes), group in sorted(groups.items()):
                sources = {func.source(op.operands[0])
                           for op in group if op.operands}
                print("%s[%s] %s over %s: %d ops, %d elements, %d scalar, "
                      "%d sources" % (func.label(multi), phase, kind, axes,
                                      len(group),
                                      sum(op.moved() for op in group),
                                      sum(op.scalar for op in group),
                                      len(sources)))


def gathers(funcs, name):
    func = next(f for f in funcs if f.name == name)
    counts = collections.OrderedDict()
    for op in func.ops:
        if op.param is not None:
            counts[op.param] = [0, 0]
    in_backward = False
    for op in func.ops:
        if op.name == "all_gather_start":
            src = func.source(op.operands[0])
            if src.startswith("param:"):
                counts[src[len("param:"):]][int(in_backward)] += 1
        if op.forward_end:
            in_backward = True
    histogram = collections.Counter()
    for param, (fwd, bwd) in counts.items():
        print("param %s: fwd %d, bwd %d" % (param, fwd, bwd))
        histogram[(fwd, bwd)] += 1
    for (fwd, bwd), n in sorted(histogram.items()):
        print("gathered fwd %d bwd %d: %d params" % (fwd, bwd, n))


def pipeline(funcs):
    for func in funcs:
        if func.name != "pipeline_step":
            continue
        counts = collections.Counter()
        order = []
        in_flight = peak = 0
        for op in func.ops:
            if op.name not in ("send_start", "recv_start"):
                continue
            kind = op.name[:-len("_start")]
            counts[(kind, op.peer)] += 1
            if func.stage == 0:
                event = {("send", 1): "F", ("recv", 1): "B"}.get((kind, op.peer))
            else:
                event = {("recv", -1): "F", ("send", -1): "B"}.get(
                    (kind, op.peer))
            if event:
                order.append(event)
                in_flight += 1 if event == "F" else -1
                peak = max(peak, in_flight)
        for (kind, peer), n in sorted(counts.items()):
            print("stage%d %s peer %+d: %d" % (func.stage, kind, peer, n))
        print("stage%d order: %s" % (func.stage, " ".join(order)))
        print("stage%d max in flight: %d" % (func.stage, peak))


def schedule(path):
    """Checks each stage's `dtc.schedule` (pipeline_step's pass order, e.g.
    "F2.1": forward of micro-batch 1 through model chunk 2) on its own terms:
    every pass of the stage's chunks once, each forward before its backward;
    prints the chunks, the forwards before the first backward and
    the most (chunk, micro-batch) activations alive at once."""
    text = open(path).read()
    lists = re.findall(r"dtc\.schedule = \[([^\]]*)\]", text)
    for stage, items in enumerate(lists):
        passes = [(kind, int(c), int(m)) for kind, c, m in
                  re.findall(r'"([FB])(\d+)\.(\d+)"', items)]
        chunks = sorted({c for _, c, _ in passes})
        micro = sorted({m for _, _, m in passes})
        done, alive, peak, warmup, ok = set(), set(), 0, None, True
        for kind, c, m in passes:
            if (kind, c, m) in done:
                ok = False
            done.add((kind, c, m))
            if kind == "F":
                alive.add((c, m))
                peak = max(peak, len(alive))
            else:
                if warmup is None:
                    warmup = sum(1 for k, _, _ in passes[:len(done) - 1]
                                 if k == "F")
                ok = ok and (c, m) in alive
                alive.discard((c, m))
        complete = len(done) == 2 * len(chunks) * len(micro) and not alive
        print("stage%d chunks: %s" % (stage, ",".join(map(str, chunks))))
        print("stage%d passes: %d, each forward once before its backward: %s"
              % (stage, len(passes), "yes" if ok and complete else "NO"))
        print("stage%d forwards before the first backward: %d" %
              (stage, warmup or 0))
        print("stage%d max in flight: %d" % (stage, peak))


def overlap(funcs, name, budget=None):
    """For each kind of started communication in FUNC (every pipeline
    stage's FUNC): how many there are and how many have compute ops (not
    communication, waits, parameters, constants or reshapes) between their
    start and their wait, i.e. run while the rank computes."""
    quiet = set(COLLECTIVES) | {"wait", "parameter", "constant", "reshape"}
    for func in funcs:
        if func.name != name:
            continue
        started, hidden = collections.Counter(), collections.Counter()
        pending = {}  # handle -> (kind, compute ops seen since its start)
        for op in func.ops:
            if op.name in COLLECTIVES and op.results:
                pending[op.results.strip()] = [op.name[:-len("_start")], 0]
            elif op.name == "wait" and op.operands[0] in pending:
                kind, compute = pending.pop(op.operands[0])
                started[kind] += 1
                hidden[kind] += compute > 0
            elif op.name not in quiet:
                for entry in pending.values():
                    entry[1] += 1
        for kind in sorted(started):
            print("%s %s: %d, %d with compute before their wait" %
                  (func.label(True), kind, started[kind], hidden[kind]))
        # The two scheduling rules, checked on the op order: a gather starts
        # before the previous gather's result is first read (prefetch); a
        # reduce-scatter is waited only where the next one starts.
        index = {}
        for i, op in enumerate(func.ops):
            for r in VALUE_RE.findall(op.results or ""):
                index[r] = i

        def first_read(value):
            return min((i for i, op in enumerate(func.ops)
                        if value in op.operands), default=len(func.ops))

        def pairs(kind):
            """(start index, wait index, first read of the wait's result)"""
            out = []
            for i, op in enumerate(func.ops):
                if op.name == kind + "_start" and op.results:
                    handle = op.results.strip()
                    w = first_read(handle)
                    result = (func.ops[w].results or "").strip() \
                        if w < len(func.ops) else ""
                    out.append((i, w, first_read(result) if result
                                else len(func.ops)))
            return out
        gathers = pairs("all_gather")
        if len(gathers) > 1:
            ahead = sum(1 for prev, cur in zip(gathers, gathers[1:])
                        if cur[0] < prev[2])
            print("%s all_gather started before the previous one is read: "
                  "%d of %d" % (func.label(True), ahead, len(gathers) - 1))
            # Prefetch depth: gathers started and not yet waited, at the
            # start of each (the gathered bytes held ahead of their use).
            size = {i: op.moved() for i, op in enumerate(func.ops)
                    if op.name == "all_gather_start"}
            depth = max((sum(1 for g in gathers if g[0] <= cur[0] < g[1]),
                         sum(size[g[0]] for g in gathers
                             if g[0] <= cur[0] < g[1]))
                        for cur in gathers)
            print("%s all_gather in flight at most: %d gathers, %d elements"
                  % (func.label(True), depth[1] and depth[0], depth[1]))
            if budget is not None:
                print("%s all_gather in flight within %d elements: %s"
                      % (func.label(True), budget,
                         "yes" if depth[1] <= budget else "no"))
        scatters = pairs("reduce_scatter")
        if len(scatters) > 1:
            # Nothing but the accumulation between a wait and the next start.
            deferred = sum(
                1 for cur, nxt in zip(scatters, scatters[1:])
                if cur[1] < nxt[0] and all(
                    op.name in ("add", "reshape")
                    for op in func.ops[cur[1] + 1:nxt[0]]))
            print("%s reduce_scatter waited where the next one starts: "
                  "%d of %d" % (func.label(True), deferred,
                                len(scatters) - 1))


def states(funcs, name):
    func = next(f for f in funcs if f.name == name)
    for role, (n, elems) in func.roles.items():
        print("%s %s: %d tensors, %d elements" % (name, role, n, elems))
    params = [op for op in func.ops if op.param is not None]
    if params:
        print("%s parameter: %d tensors, %d elements" %
              (name, len(params), sum(op.out_elems for op in params)))


def work(funcs):
    for name in ("micro_step", "pipeline_step"):
        mine = [f for f in funcs if f.name == name]
        if not mine:
            continue
        micro = mine[0].micro if name == "pipeline_step" else 1
        ops = [op for f in mine for op in f.ops]
        matmuls = sum(op.name == "matmul" for op in ops)
        recomputed = sum(op.recomputed for op in ops)
        print("%s per micro-batch: %g matmuls, %g recomputed ops" %
              (name, matmuls / micro, recomputed / micro))


def unused(path, name):
    """How many dtc op results in FUNC nothing reads (not even the return):
    dead computation a pass left behind, which a CPU rank still runs."""
    defined, used, current = {}, set(), None
    with open(path) as f:
        for line in f:
            m = FUNC_RE.match(line)
            if m:
                current = m.group(1)
                continue
            if current != name:
                continue
            m = OP_RE.match(line)
            rest = line
            if m and m.group(1):
                for value in VALUE_RE.findall(m.group(1)):
                    defined[value] = m.group(2)
                rest = m.group(3)
            used.update(VALUE_RE.findall(rest))
    dead = collections.Counter(kind for value, kind in defined.items()
                               if value not in used)
    print("%s unused results: %d%s" % (
        name, sum(dead.values()),
        "".join(" %s:%d" % item for item in sorted(dead.items()))))


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    funcs = parse(argv[2])
    if not funcs:
        sys.exit("count_ops.py: no func.func in %s" % argv[2])
    commands = {
        "collectives": lambda: collectives(funcs),
        "gathers": lambda: gathers(funcs, argv[3]),
        "pipeline": lambda: pipeline(funcs),
        "states": lambda: states(funcs, argv[3]),
        "schedule": lambda: schedule(argv[2]),
        "overlap": lambda: overlap(funcs, argv[3],
                                   int(argv[4]) if len(argv) > 4 else None),
        "work": lambda: work(funcs),
        "unused": lambda: unused(argv[2], argv[3]),
    }
    if argv[1] not in commands:
        sys.exit(__doc__)
    print("begin")
    commands[argv[1]]()
    print("end")


if __name__ == "__main__":
    main(sys.argv)
