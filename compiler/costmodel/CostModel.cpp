//===- CostModel.cpp - Step time and memory of one plan -------------------===//
//
// Everything here is per GPU and, inside a block, per micro-batch. The
// slowest pipeline stage sets the pace; each communication is priced where
// the schedule puts it: blocking on the critical path (TP, EP, PP p2p),
// behind a named computation (the SP re-gather behind the input-gradient
// GEMM, ring attention behind attention, ZeRO-3 prefetch behind the previous
// block, DP reduction behind the last micro-batch's backward, ZeRO param
// gather behind the first forward), or exposed when the plan turns overlap off.
//
//===----------------------------------------------------------------------===//

#include "compiler/costmodel/CostModel.h"
#include "compiler/costmodel/StepTime.h"

#include "compiler/costmodel/Collectives.h"
#include "compiler/costmodel/Compute.h"
#include "compiler/costmodel/KernelTime.h"
#include "compiler/costmodel/Memory.h"
#include "compiler/costmodel/Pipeline.h"
#include "runtime/support/Error.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Format.h"

#include <algorithm>
#include <array>

using namespace dtc;

CommTimes Prediction::commHidden() const {
  return {commTime.dp - commExposed.dp, commTime.tp - commExposed.tp,
          commTime.pp - commExposed.pp, commTime.cp - commExposed.cp,
          commTime.ep - commExposed.ep};
}

/// Forward FLOPs of one block for one sequence, attention counted unmasked.
static double blockForwardFlops(const TransformerSpec &spec) {
  double s = static_cast<double>(spec.seqLen);
  double h = static_cast<double>(spec.hidden);
  double attnWidth = static_cast<double>(spec.heads * spec.headDim());
  double kvWidth = static_cast<double>(spec.kvHeadCount() * spec.headDim());
  double f = static_cast<double>(spec.ffn());
  double flops = 2 * s * h * (attnWidth + 2 * kvWidth) // QKV
                 + 2 * s * attnWidth * h               // Output projection.
                 + 4 * s * s * attnWidth;              // Scores and values.
  double mlp = 2 * s * h * f * (spec.gatedMlp ? 3 : 2);
  if (spec.moe())
    flops += mlp * static_cast<double>(spec.topK) +
             2 * s * h * static_cast<double>(spec.experts);
  else
    flops += mlp;
  return flops;
}

double dtc::trainingFlopsPerToken(const TransformerSpec &spec) {
  if (spec.irKernels) // What the program computes, as its ops count it.
    return 3 * spec.irKernels->modelFlopsPerToken;
  double s = static_cast<double>(spec.seqLen);
  if (s <= 0)
    return 0;
  double logits = 2 * s * static_cast<double>(spec.hidden * spec.vocab);
  return 3 *
         (static_cast<double>(spec.layers) * blockForwardFlops(spec) + logits) /
         s;
}

llvm::Error dtc::validatePlan(const TransformerSpec &spec,
                              const ParallelPlan &plan,
                              const Cluster &cluster) {
  if (spec.layers <= 0 || spec.hidden <= 0 || spec.heads <= 0 ||
      spec.vocab <= 0 || spec.seqLen <= 0)
    return badInput("model {0}: layers, hidden, heads, vocab and sequence "
                    "length must be positive",
                    spec.name);
  if (spec.hidden % spec.heads)
    return badInput("model {0}: hidden size {1} is not a multiple of {2} heads",
                    spec.name, spec.hidden, spec.heads);
  if (spec.kvHeadCount() <= 0 || spec.heads % spec.kvHeadCount())
    return badInput("model {0}: {1} heads are not a multiple of {2} kv heads",
                    spec.name, spec.heads, spec.kvHeadCount());
  if (spec.experts < 1 || spec.topK < 1 || spec.topK > spec.experts)
    return badInput("model {0}: top-k {1} must be between 1 and the {2} "
                    "experts",
                    spec.name, spec.topK, spec.experts);
  if (cluster.peakFlops(spec.dtype) <= 0)
    return badInput("cluster {0}: {1} has no {2} peak; use another --dtype",
                    cluster.name, cluster.gpu, dtypeName(spec.dtype));
  if (cluster.gpusPerNode < 1 || cluster.hbmBytesPerSecond <= 0 ||
      cluster.intraNodeGBps <= 0 || cluster.interNodeGBps <= 0)
    return badInput("cluster {0}: GPUs per node, HBM and link bandwidths "
                    "must be positive",
                    cluster.name);

  for (auto [name, value] : {std::pair<const char *, int64_t>{"dp", plan.dp},
                             {"tp", plan.tp},
                             {"pp", plan.pp},
                             {"cp", plan.cp},
                             {"ep", plan.ep},
                             {"vpp", plan.vpp},
                             {"micro-batch", plan.microBatch},
                             {"global-batch", plan.globalBatch}})
    if (value < 1)
      return badInput("plan: {0} must be at least 1, got {1}", name, value);
  if (plan.gpus() != cluster.gpus)
    return badInput("plan: dp x tp x pp x cp = {0} x {1} x {2} x {3} = {4} "
                    "GPUs, but the cluster has {5}",
                    plan.dp, plan.tp, plan.pp, plan.cp, plan.gpus(),
                    cluster.gpus);
  if (plan.zero < 0 || plan.zero > 3)
    return badInput("plan: ZeRO stage must be 0..3, got {0}", plan.zero);
  for (MeshAxis axis : {MeshAxis::TP, MeshAxis::CP, MeshAxis::DP, MeshAxis::PP})
    if (llvm::count(plan.meshOrder, axis) != 1)
      return badInput("plan: the mesh order must name tp, cp, dp and pp once "
                      "each");
  if (spec.heads % plan.tp)
    return badInput("plan: tp={0} does not divide the {1} attention heads",
                    plan.tp, spec.heads);
  int64_t kv = spec.kvHeadCount();
  if (kv % plan.tp && plan.tp % kv)
    return badInput("plan: tp={0} and the {1} kv heads must divide one "
                    "another",
                    plan.tp, kv);
  if (spec.ffn() % plan.tp)
    return badInput("plan: tp={0} does not divide the FFN width {1}", plan.tp,
                    spec.ffn());
  if (plan.pp > spec.layers)
    return badInput("plan: pp={0} is more pipeline stages than the {1} "
                    "layers",
                    plan.pp, spec.layers);
  if (spec.seqLen % contextPieces(plan.cp))
    return badInput("plan: cp={0} needs the sequence length {1} to split "
                    "into {2} zigzag halves",
                    plan.cp, spec.seqLen, contextPieces(plan.cp));
  if (plan.ep > 1 && !spec.moe())
    return badInput("plan: ep={0} needs a mixture-of-experts model", plan.ep);
  if (spec.experts % plan.ep)
    return badInput("plan: ep={0} does not divide the {1} experts", plan.ep,
                    spec.experts);
  if ((plan.dp * plan.cp) % plan.ep)
    return badInput("plan: ep={0} must divide dp x cp = {1} (experts are "
                    "sharded across data-parallel replicas)",
                    plan.ep, plan.dp * plan.cp);
  if (plan.globalBatch % (plan.dp * plan.microBatch))
    return badInput("plan: global batch {0} is not a multiple of dp x "
                    "micro-batch = {1}",
                    plan.globalBatch, plan.dp * plan.microBatch);
  if (plan.schedule == Schedule::Interleaved) {
    if (plan.pp < 2 || plan.vpp < 2)
      return badInput("plan: the interleaved schedule needs pp >= 2 and "
                      "vpp >= 2, got pp={0} vpp={1}",
                      plan.pp, plan.vpp);
    // Uneven chunks are fine (the pipeline pass balances its cuts by
    // cost); each needs a layer.
    if (spec.layers < plan.pp * plan.vpp)
      return badInput("plan: {0} layers do not fill pp x vpp = {1} chunks",
                      spec.layers, plan.pp * plan.vpp);
    if (plan.microBatches() % plan.pp)
      return badInput("plan: the interleaved schedule needs the {0} "
                      "micro-batches to be a multiple of pp={1}",
                      plan.microBatches(), plan.pp);
  } else if (plan.vpp != 1) {
    return badInput("plan: vpp={0} needs the interleaved schedule", plan.vpp);
  }
  return llvm::Error::success();
}

namespace {
/// One block (or half of one), one micro-batch, one GPU.
struct BlockCost {
  double forward = 0;   ///< Kernels of the forward.
  double backward = 0;  ///< Kernels of the backward.
  double recompute = 0; ///< Kernels re-run before the backward.
  /// The weight-gradient GEMMs among the backward kernels (W: what the
  /// zero-bubble schedules defer; the rest of the backward is B).
  double weightGrad = 0;
  CommTimes comm;    ///< Issued.
  CommTimes exposed; ///< On the critical path.
  double time() const {
    return forward + backward + recompute + exposed.total();
  }
  BlockCost operator*(double k) const {
    return {k * forward,    k * backward, k * recompute,
            k * weightGrad, comm * k,     exposed * k};
  }
  BlockCost operator+(const BlockCost &o) const {
    return {forward + o.forward,     backward + o.backward,
            recompute + o.recompute, weightGrad + o.weightGrad,
            comm + o.comm,           exposed + o.exposed};
  }
};

/// A block as the pipeline pass may cut it: its attention half and its MLP
/// half, between which only the residual stream flows.
struct BlockHalves {
  BlockCost attention, mlp;
  BlockCost whole() const { return attention + mlp; }
};

/// Everything predict() derives once from the plan before composing.
struct Context {
  const TransformerSpec &spec;
  const ParallelPlan &plan;
  const Cluster &cluster;
  DType type;
  double e, t, b, sq, s, h, tokens, rep;
  GroupPlacement tpGroup, cpGroup, epGroup, ppPair, gradGroup, expertGradGroup;

  Context(const TransformerSpec &spec, const ParallelPlan &plan,
          const Cluster &cluster)
      : spec(spec), plan(plan), cluster(cluster), type(spec.dtype) {
    e = static_cast<double>(spec.bytes());
    t = static_cast<double>(plan.tp);
    b = static_cast<double>(plan.microBatch);
    s = static_cast<double>(spec.seqLen);
    sq = s / static_cast<double>(plan.cp);
    h = static_cast<double>(spec.hidden);
    tokens = b * sq;
    rep = plan.sequenceParallel ? 1 / t : 1;
    int64_t gpn = cluster.gpusPerNode;
    tpGroup = placeGroup(plan.tp, plan.stride(MeshAxis::TP), gpn);
    cpGroup = placeGroup(plan.cp, plan.stride(MeshAxis::CP), gpn);
    GroupPlacement dpGroup =
        placeGroup(plan.dp, plan.stride(MeshAxis::DP), gpn);
    // Experts split the innermost dp ranks.
    epGroup = placeGroup(plan.ep, plan.stride(MeshAxis::DP), gpn);
    ppPair = placeGroup(2, plan.stride(MeshAxis::PP), gpn);
    // Gradients are reduced over dp x cp; members per domain multiply when
    // the two axes nest inside one domain.
    gradGroup.size = plan.dp * plan.cp;
    gradGroup.perDomain =
        std::min(gradGroup.size, dpGroup.perDomain * cpGroup.perDomain);
    expertGradGroup.size = gradGroup.size / plan.ep;
    expertGradGroup.perDomain = std::clamp<int64_t>(
        gradGroup.perDomain / epGroup.perDomain, 1, expertGradGroup.size);
  }

  double coll(Collective kind, double bytes, const GroupPlacement &g) const {
    return collectiveTime(kind, bytes, g, cluster);
  }
};
} // namespace

/// What of a TP collective split into `chunks` row blocks, pipelined with
/// the `gemm` (also in blocks) it follows or feeds, is not hidden: block
/// i's communication runs while block i + 1 multiplies, so the first (or
/// last) block's is always exposed and the rest only where communication
/// outpaces the GEMM (ChunkCollectives.cpp emits this).
static double pipelinedExposed(double comm, double gemm, double chunks) {
  return std::max(comm / chunks, comm - gemm * (chunks - 1) / chunks);
}

/// Whether the program can cut each TP collective's tensor [micro-batch,
/// sequence, hidden] into `chunks` row blocks: along the batch or the
/// sequence, or, with sequence parallelism, strided along the dimension it
/// splits (the batch where tp divides it: the propagation's usual choice).
static bool tpChunksFit(const Context &c, int64_t chunks) {
  auto divides = [&](int64_t size) { return size > 1 && size % chunks == 0; };
  int64_t microBatch = c.plan.microBatch;
  int64_t localSeq = c.spec.seqLen / c.plan.cp;
  if (chunks == 1)
    return true;
  if (!c.plan.sequenceParallel)
    return divides(microBatch) || divides(localSeq);
  bool batchSplit = microBatch % c.plan.tp == 0;
  int64_t split = batchSplit ? microBatch : localSeq;
  return divides(batchSplit ? localSeq : microBatch) ||
         (split / c.plan.tp) % chunks == 0;
}

namespace {
/// The kernels of one block on one GPU for one micro-batch: its GEMMs (the
/// TP ones in `chunks` row blocks) and the attention core.
struct BlockKernels {
  LinearTimes qkv, proj, up, down, router;
  double coreForward = 0, coreBackward = 0;
  double routed = 1; ///< Expert rows per token; 1 for a dense MLP.
  double chunks = 1;
};
} // namespace

/// Passes of the forward per step: two under full recompute.
static double forwardPasses(const ParallelPlan &plan) {
  return plan.recompute == Recompute::Full ? 2 : 1;
}

static void blockGemms(const Context &c, BlockKernels &k) {
  const TransformerSpec &spec = c.spec;
  double a = static_cast<double>(spec.heads);
  double kv = static_cast<double>(spec.kvHeadCount());
  double hd = static_cast<double>(spec.headDim());
  double f = static_cast<double>(spec.ffn());
  double t = c.t, T = c.tokens, h = c.h;
  auto tpLinear = [&](double n, double depth) {
    LinearTimes one = linearTimes(T / k.chunks, n, depth, 1, c.type, c.cluster);
    return LinearTimes{k.chunks * one.forward, k.chunks * one.backward,
                       k.chunks * one.inputGrad};
  };
  auto sum = [](const LinearTimes &x, const LinearTimes &y) {
    return LinearTimes{x.forward + y.forward, x.backward + y.backward,
                       x.inputGrad + y.inputGrad};
  };
  // One GEMM each for Q, K and V, or for gate and up, where the IR has them.
  const IrKernels *ir = spec.irKernels ? &*spec.irKernels : nullptr;
  if (ir && ir->separateQkv) {
    LinearTimes kOrV = tpLinear(kv * hd / t, h);
    k.qkv = sum(tpLinear(a * hd / t, h), sum(kOrV, kOrV));
  } else {
    k.qkv = tpLinear((a + 2 * kv) * hd / t, h);
  }
  k.proj = tpLinear(h, a * hd / t);
  double gateWidth = spec.gatedMlp ? 2 : 1;
  if (!spec.moe()) {
    k.up = ir && ir->separateGateUp && spec.gatedMlp
               ? sum(tpLinear(f / t, h), tpLinear(f / t, h))
               : tpLinear(gateWidth * f / t, h);
    k.down = tpLinear(h, f / t);
    return;
  }
  double localExperts = static_cast<double>(spec.experts / c.plan.ep);
  k.routed = spec.expertRows();
  // A ragged dispatch waits for its busiest expert; a static buffer is the
  // same size for every expert.
  double load = spec.expertRowsPerToken > 0 ? 1 : spec.routingImbalance;
  double perExpert = T * k.routed * load / localExperts;
  k.up = linearTimes(perExpert, gateWidth * f / t, h, localExperts, c.type,
                     c.cluster);
  k.down = linearTimes(perExpert, h, f / t, localExperts, c.type, c.cluster);
  k.router = linearTimes(T, static_cast<double>(spec.experts), h, 1, c.type,
                         c.cluster);
}

static void attentionCore(const Context &c, BlockKernels &k) {
  const TransformerSpec &spec = c.spec;
  double hd = static_cast<double>(spec.headDim());
  double heads = c.b * static_cast<double>(spec.heads) / c.t;
  if (c.plan.fusedAttention) {
    double flops = 4 * heads * c.sq * c.s * hd * (spec.causal ? 0.5 : 1);
    double rate = c.cluster.peakFlops(attentionType(c.type)) *
                  fusedAttentionEfficiency(c.sq, c.s, hd, c.cluster);
    k.coreForward = flops / rate;
    // The backward re-forms the scores: five GEMMs against two on a GPU
    // (the cluster's attentionBackwardRatio).
    k.coreBackward = c.cluster.attentionBackwardRatio * k.coreForward;
    return;
  }
  DType core = attentionType(c.type);
  LinearTimes scores = linearTimes(c.sq, c.s, hd, heads, core, c.cluster);
  LinearTimes values = linearTimes(c.sq, hd, c.s, heads, core, c.cluster);
  double p = heads * c.sq * c.s, e = c.e;
  double mask = spec.dropout ? 1 : 0;
  // Fused scale-mask-softmax reads and writes the scores; dropout reads
  // them and writes its output and mask.
  double softmaxFwd = 2 * e * p + mask * (2 * e + 1) * p;
  double softmaxBwd = 3 * e * p + mask * (2 * e + 1) * p;
  k.coreForward =
      scores.forward + values.forward + streamTime(softmaxFwd, c.cluster);
  k.coreBackward =
      scores.backward + values.backward + streamTime(softmaxBwd, c.cluster);
}

/// Tensor parallelism: blocking collectives on the activations, twice per
/// pass in each half; a full recompute repeats the forward ones.
static void addTensorParallelComm(const Context &c, const BlockKernels &g,
                                  BlockHalves &cost) {
  const ParallelPlan &plan = c.plan;
  double k = g.chunks, passes = forwardPasses(plan);
  double bytes = c.e * c.tokens * c.h;
  // Each collective in `chunks` blocks: as many latencies.
  auto coll = [&](Collective kind) {
    return k * c.coll(kind, bytes / k, c.tpGroup);
  };
  // The weight-gradient GEMMs of the two column-parallel linears, which the
  // reduction of their input gradients may run behind.
  double qkvWgrad = g.qkv.backward - g.qkv.inputGrad;
  double upWgrad = g.up.backward - g.up.inputGrad;
  auto behind = [&](double comm, double window) {
    return plan.overlapTpComm ? std::max(0.0, comm - window) : comm;
  };
  // A collective pipelined block by block with its GEMM.
  auto pipelined = [&](double comm, double gemm) {
    return pipelinedExposed(comm, gemm, k);
  };
  if (!plan.sequenceParallel) {
    // Forward: all-reduce after each row-parallel linear. Backward:
    // all-reduce of each column-parallel input gradient.
    double ar = coll(Collective::AllReduce);
    cost.attention.comm.tp = cost.mlp.comm.tp = (passes + 1) * ar;
    cost.attention.exposed.tp =
        passes * pipelined(ar, g.proj.forward) +
        behind(pipelined(ar, g.qkv.inputGrad), qkvWgrad);
    cost.mlp.exposed.tp = passes * pipelined(ar, g.down.forward) +
                          behind(pipelined(ar, g.up.inputGrad), upWgrad);
  } else {
    // Forward: all-gather before each column-parallel linear,
    // reduce-scatter after each row-parallel one. Backward: all-gather of
    // the row-parallel output gradients (before their input-gradient GEMM),
    // a re-gather of the column-parallel inputs behind their input-gradient
    // GEMM, and the reduce-scatter of those input gradients behind the
    // weight gradient.
    double ag = coll(Collective::AllGather);
    double rs = coll(Collective::ReduceScatter);
    // The re-gathers feed only the weight gradient, which reads all rows:
    // never in blocks.
    double regather = c.coll(Collective::AllGather, bytes, c.tpGroup);
    // Each half: its column-parallel linear (in) and row-parallel one (out).
    auto half = [&](BlockCost &cost, const LinearTimes &in,
                    const LinearTimes &out, double inWgrad) {
      cost.comm.tp = passes * (ag + rs) + ag + regather + rs;
      cost.exposed.tp =
          passes * (pipelined(ag, in.forward) + pipelined(rs, out.forward)) +
          pipelined(ag, out.inputGrad) +
          std::max(0.0, regather - in.inputGrad) +
          behind(pipelined(rs, in.inputGrad), inWgrad);
    };
    half(cost.attention, g.qkv, g.proj, qkvWgrad);
    half(cost.mlp, g.up, g.down, upWgrad);
  }
  if (k > 1) {
    // Slicing a GEMM's input into blocks and concatenating its results
    // copies about one activation per chunked collective (the runtime
    // copies slices; a GEMM writing into its block of the result would
    // not).
    double perPass =
        (plan.sequenceParallel ? 2 : 1) * streamTime(2 * bytes, c.cluster);
    for (BlockCost *part : {&cost.attention, &cost.mlp}) {
      part->forward += perPass;
      part->backward += perPass;
      if (plan.recompute == Recompute::Full)
        part->recompute += perPass;
    }
  }
}

/// Context parallelism: K and V travel around the ring, one hop per peer,
/// behind the attention of the block already received.
static void addContextParallelComm(const Context &c, const BlockKernels &g,
                                   BlockCost &attention) {
  double kv = static_cast<double>(c.spec.kvHeadCount());
  double hd = static_cast<double>(c.spec.headDim());
  double hop = c.coll(Collective::SendRecv, 2 * c.e * c.tokens * kv * hd / c.t,
                      c.cpGroup);
  double ring = static_cast<double>(c.plan.cp - 1) * hop;
  double fwd = std::max(0.0, ring - g.coreForward);
  double bwd = std::max(0.0, 2 * ring - g.coreBackward); // K, V and dK, dV.
  double passes = forwardPasses(c.plan);
  attention.comm.cp = passes * ring + 2 * ring;
  attention.exposed.cp = passes * fwd + bwd;
}

/// ZeRO-3: gather the block's weights before its forward and backward,
/// scatter its gradients after; prefetched behind the neighbouring block.
static void addZero3Comm(const Context &c, const LayerParams &params,
                         BlockCost &cost) {
  double e = c.e;
  double gather =
      c.coll(Collective::AllGather, e * params.dense, c.gradGroup) +
      c.coll(Collective::AllGather, e * params.expert, c.expertGradGroup);
  double scatter =
      c.coll(Collective::ReduceScatter, e * params.dense, c.gradGroup) +
      c.coll(Collective::ReduceScatter, e * params.expert, c.expertGradGroup);
  cost.comm.dp = 2 * gather + scatter;
  cost.exposed.dp =
      std::max(0.0, gather - cost.forward) +
      std::max(0.0, gather + scatter - cost.backward - cost.recompute);
}

static BlockHalves blockCost(const Context &c, int64_t chunks) {
  const TransformerSpec &spec = c.spec;
  const ParallelPlan &plan = c.plan;
  BlockKernels g;
  g.chunks = static_cast<double>(chunks);
  blockGemms(c, g);
  attentionCore(c, g);
  BlockHalves cost;
  // Streaming kernels, a backward moving twice the bytes: the IR's ops
  // when the spec was read off it, else Megatron-LM's fused kernels (each
  // half's norm and bias(-dropout)-residual add, the MLP's activation).
  double e = c.e, x = c.tokens * c.h, mask = spec.dropout ? 1 : 0;
  double attentionStream, mlpStream;
  if (spec.irKernels) {
    auto bytes = [&](const IrKernels::Half &half) {
      return c.tokens *
             (half.whole.bytes(e) * c.rep + half.split.bytes(e) / c.t);
    };
    attentionStream = bytes(spec.irKernels->attention);
    mlpStream = bytes(spec.irKernels->mlp);
  } else {
    attentionStream = 2 * e * x * c.rep + (3 * e + mask) * x * c.rep;
    mlpStream = attentionStream + (spec.gatedMlp ? 3 : 2) * e * c.tokens *
                                      g.routed *
                                      static_cast<double>(spec.ffn()) / c.t;
  }
  auto kernels = [&](BlockCost &half, double gemmFwd, double gemmBwd,
                     double stream) {
    half.forward = gemmFwd + streamTime(stream, c.cluster);
    half.backward = gemmBwd + streamTime(2 * stream, c.cluster);
  };
  kernels(cost.attention, g.qkv.forward + g.proj.forward,
          g.qkv.backward + g.proj.backward, attentionStream);
  cost.attention.forward += g.coreForward;
  cost.attention.backward += g.coreBackward;
  kernels(cost.mlp, g.up.forward + g.down.forward + g.router.forward,
          g.up.backward + g.down.backward + g.router.backward, mlpStream);
  // The weight-gradient GEMMs (W, which zero-bubble schedules defer).
  auto weightGrad = [](const LinearTimes &t) {
    return t.backward - t.inputGrad;
  };
  cost.attention.weightGrad = weightGrad(g.qkv) + weightGrad(g.proj);
  cost.mlp.weightGrad =
      weightGrad(g.up) + weightGrad(g.down) + weightGrad(g.router);
  for (BlockCost *half : {&cost.attention, &cost.mlp})
    if (plan.recompute == Recompute::Full)
      half->recompute = half->forward;
  if (plan.recompute == Recompute::Selective && !plan.fusedAttention)
    cost.attention.recompute = g.coreForward;
  if (plan.tp > 1)
    addTensorParallelComm(c, g, cost);
  if (plan.cp > 1)
    addContextParallelComm(c, g, cost.attention);
  // Expert parallelism: dispatch and combine all-to-alls, blocking.
  if (spec.moe() && plan.ep > 1) {
    double a2a = c.coll(Collective::AllToAll,
                        e * c.tokens * g.routed * c.h * c.rep, c.epGroup);
    cost.mlp.comm.ep = (2 * forwardPasses(plan) + 2) * a2a;
    cost.mlp.exposed.ep = cost.mlp.comm.ep;
  }
  if (plan.zero >= 3 && plan.dp * plan.cp > 1) {
    // Gathered a block at a time; each half's share in its parameters'.
    LayerParams params = layerParamCount(spec, plan);
    BlockCost whole = cost.whole();
    addZero3Comm(c, params, whole);
    double share = attentionParamCount(spec, plan).total() / params.total();
    cost.attention.comm.dp = share * whole.comm.dp;
    cost.attention.exposed.dp = share * whole.exposed.dp;
    cost.mlp.comm.dp = (1 - share) * whole.comm.dp;
    cost.mlp.exposed.dp = (1 - share) * whole.exposed.dp;
  }
  return cost;
}

namespace {
/// Embedding (first stage) or output layer and loss (last stage).
struct EdgeCost {
  double compute = 0;
  double forward = 0; ///< The forward kernels among them.
  double tp = 0;      ///< The TP communication that blocks compute.
  double tpTotal = 0; ///< All of it, hidden or not.
};
} // namespace

static EdgeCost embeddingCost(const Context &c) {
  EdgeCost cost;
  double x = c.tokens * c.h;
  // Gather rows (and dropout) forward, scatter-add the gradient backward:
  // the IR's ops, forward and backward, or Megatron-LM's kernel.
  cost.compute =
      c.spec.irKernels
          ? streamTime(3 * c.tokens * c.spec.irKernels->embedding.bytes(c.e),
                       c.cluster)
          : streamTime((6 * c.e + (c.spec.dropout ? 1 : 0)) * x, c.cluster);
  cost.forward = cost.compute / 3; // A backward moves twice the bytes.
  if (c.plan.tp > 1) // Vocabulary-parallel lookup sums the partial rows.
    cost.tp = cost.tpTotal =
        c.coll(c.plan.sequenceParallel ? Collective::ReduceScatter
                                       : Collective::AllReduce,
               c.e * x, c.tpGroup);
  return cost;
}

/// The output layer (final norm, LM head, loss). Its TP collectives go in
/// `chunks` row blocks with the head's GEMMs when the blocks do
/// (ChunkCollectives treats every TP GEMM alike): the sequence all-gather
/// before the logits (SP) and the reduction of the input gradient after
/// them, the latter behind the head's weight-gradient GEMM as the block's
/// are.
static EdgeCost outputCost(const Context &c, int64_t chunks) {
  EdgeCost cost;
  double v = static_cast<double>(c.spec.vocab);
  double x = c.tokens * c.h;
  double k = static_cast<double>(chunks);
  LinearTimes logits =
      linearTimes(c.tokens / k, v / c.t, c.h, 1, c.type, c.cluster);
  logits = {k * logits.forward, k * logits.backward, k * logits.inputGrad};
  // The final norm, forward and backward, and the loss: the IR's ops and
  // the dtc.cross_entropy the step binds, or Megatron-LM's cross-entropy,
  // which reads fp16 logits into an fp32 softmax and back.
  double logitElems = c.tokens * v / c.t;
  double streams;
  if (c.spec.irKernels) {
    KernelWork loss = kernelWork(
        crossEntropyKernel(c.tokens, v / c.t, static_cast<int64_t>(c.e)));
    streams =
        3 * streamTime(c.tokens * c.spec.irKernels->output.bytes(c.e) * c.rep,
                       c.cluster) +
        kernelSeconds(loss, c.type, c.cluster) +
        backwardKernelSeconds(loss, c.type, c.cluster);
  } else {
    streams = streamTime(3 * 2 * c.e * x * c.rep, c.cluster) +
              streamTime(2 * (c.e + 4) * logitElems, c.cluster);
  }
  // A backward moves twice a streaming kernel's bytes.
  cost.forward = logits.forward + streams / 3;
  cost.compute = logits.forward + logits.backward + streams;
  if (c.plan.tp > 1) {
    double bytes = c.e * x;
    auto coll = [&](Collective kind) {
      return k * c.coll(kind, bytes / k, c.tpGroup);
    };
    double wgrad = logits.backward - logits.inputGrad;
    double reduce = coll(c.plan.sequenceParallel ? Collective::ReduceScatter
                                                 : Collective::AllReduce);
    double inputGrad = pipelinedExposed(reduce, logits.inputGrad, k);
    cost.tp =
        c.plan.overlapTpComm ? std::max(0.0, inputGrad - wgrad) : inputGrad;
    cost.tpTotal = reduce;
    if (c.plan.sequenceParallel) {
      double gather = coll(Collective::AllGather);
      cost.tp += pipelinedExposed(gather, logits.forward, k);
      cost.tpTotal += gather;
    }
    // Blocks cost a copy of the activation per chunked collective.
    if (chunks > 1)
      cost.compute +=
          (c.plan.sequenceParallel ? 2 : 1) * streamTime(2 * bytes, c.cluster);
    // The vocabulary-parallel loss gathers 3 f32 per row from every rank
    // (max, sum of exponentials, label logit: cross_entropy_stats).
    double stats =
        c.coll(Collective::AllGather, 12 * c.tokens * c.t, c.tpGroup);
    cost.tp += stats;
    cost.tpTotal += stats;
  }
  return cost;
}

DataParallelCost dtc::dataParallelCost(const ParallelPlan &plan,
                                       double gradBytes, double expertGradBytes,
                                       double elementBytes,
                                       const GroupPlacement &gradGroup,
                                       const GroupPlacement &expertGradGroup,
                                       double lastBackward, double firstForward,
                                       const Cluster &cluster) {
  DataParallelCost cost;
  if (plan.dp * plan.cp <= 1)
    return cost;
  auto coll = [&](Collective kind, double bytes, const GroupPlacement &g) {
    return collectiveTime(kind, bytes, g, cluster);
  };
  // The last gradient bucket (Megatron: 40M elements) cannot overlap.
  double tailShare = std::min(
      1.0, 40e6 * elementBytes / std::max(gradBytes + expertGradBytes, 1.0));
  auto hidden = [&](double time, double window, bool overlap) {
    return overlap ? std::max(time * tailShare, time - window) : time;
  };
  if (plan.zero == 0) {
    double reduce =
        coll(Collective::AllReduce, gradBytes, gradGroup) +
        coll(Collective::AllReduce, expertGradBytes, expertGradGroup);
    cost.time += reduce;
    cost.exposed += hidden(reduce, lastBackward, plan.overlapGradReduce);
  } else if (plan.zero <= 2) {
    double scatter =
        coll(Collective::ReduceScatter, gradBytes, gradGroup) +
        coll(Collective::ReduceScatter, expertGradBytes, expertGradGroup);
    double gather =
        coll(Collective::AllGather, gradBytes, gradGroup) +
        coll(Collective::AllGather, expertGradBytes, expertGradGroup);
    // ZeRO-2 keeps no full gradient buffer: every micro-batch scatters.
    double times =
        plan.zero == 2 ? static_cast<double>(plan.microBatches()) : 1;
    cost.time += times * scatter + gather;
    cost.exposed +=
        times * hidden(scatter, lastBackward, plan.overlapGradReduce);
    cost.exposed += hidden(gather, firstForward, plan.overlapParamGather);
  }
  return cost;
}

void dtc::setFlopRates(Prediction &out, double gpus, double peakFlops) {
  out.tflopsPerGpu = out.modelFlopsPerStep / out.stepTimeS / gpus / 1e12;
  out.hwTflopsPerGpu = out.hwFlopsPerStep / out.stepTimeS / gpus / 1e12;
  out.mfu = out.tflopsPerGpu * 1e12 / peakFlops;
  out.hfu = out.hwTflopsPerGpu * 1e12 / peakFlops;
}

double dtc::optimizerStepSeconds(double shardParams, double elementBytes,
                                 const Cluster &cluster) {
  // The optimizer step streams its shard several times (Megatron's
  // mixed-precision optimizer): gradients copied to fp32 and checked for
  // inf/nan, the norm for clipping, Adam reading weights, gradients and
  // moments and writing three of them back, weights copied back to 16 bits,
  // gradients zeroed. fp32 training skips the copies and the check.
  double e = elementBytes;
  double stepBytesPerParam = e >= 4 ? 36 : (e + 4) + 4 + 4 + 28 + (4 + e) + e;
  return streamTime(shardParams * stepBytesPerParam, cluster);
}

/// The block's cost with the plan's TP row blocks, or the fastest that fits
/// (dense TP only; the program leaves MoE layers whole); `chunks` receives
/// the count.
static BlockHalves blockWithTpChunks(const Context &c, int64_t &chunks) {
  const ParallelPlan &plan = c.plan;
  chunks = 1;
  BlockHalves block = blockCost(c, 1);
  llvm::SmallVector<int64_t, 2> candidates{2, 4};
  if (plan.tpCommChunks)
    candidates.assign({plan.tpCommChunks});
  if (plan.tp == 1 || !plan.overlapTpComm || c.spec.moe())
    return block;
  for (int64_t k : candidates) {
    if (k < 2 || !tpChunksFit(c, k))
      continue;
    BlockHalves split = blockCost(c, k);
    if (plan.tpCommChunks || split.whole().time() < block.whole().time()) {
      block = split;
      chunks = k;
    }
  }
  return block;
}

namespace {
/// The block halves a pipeline chunk, or all of a stage's chunks, runs.
struct HalfCounts {
  int64_t attention = 0, mlp = 0;
  BlockCost of(const BlockHalves &block) const {
    return block.attention * static_cast<double>(attention) +
           block.mlp * static_cast<double>(mlp);
  }
  double of(double attentionPart, double whole) const {
    return static_cast<double>(attention) * attentionPart +
           static_cast<double>(mlp) * (whole - attentionPart);
  }
};
} // namespace

/// The halves of each of `chunks` pipeline chunks, cut where the pipeline
/// pass cuts (chooseCuts in passes/training/Pipeline.cpp): at the points
/// only the residual stream crosses (the embedding's end, each block half's
/// start, the output layer's start), each chunk starting at the point whose
/// forward FLOPs before it come closest to an even share, every chunk
/// holding a unit. FLOPs counted as the IR's ops count them (OpCost.h):
/// GEMMs and attention in full, one per element of the streaming ops.
static llvm::SmallVector<HalfCounts> pipelineChunks(const TransformerSpec &spec,
                                                    int64_t chunks) {
  double s = static_cast<double>(spec.seqLen);
  double h = static_cast<double>(spec.hidden);
  double attnWidth = static_cast<double>(spec.heads * spec.headDim());
  double kvWidth = static_cast<double>(spec.kvHeadCount() * spec.headDim());
  double f = static_cast<double>(spec.ffn());
  double attention = 2 * s * h * (attnWidth + 2 * kvWidth) +
                     2 * s * attnWidth * h + 4 * s * s * attnWidth;
  double mlp = blockForwardFlops(spec) - attention;
  // Norms, residual adds and the activation, one FLOP per element.
  attention += 3 * s * h;
  mlp += 3 * s * h + s * f * (spec.gatedMlp ? 2 : 1);
  double output = 2 * s * h * static_cast<double>(spec.vocab) + 2 * s * h;
  // Units: the embedding, then each block's two halves, then the output.
  const int64_t units = 2 * spec.layers + 2;
  llvm::SmallVector<double> before(units + 1, 0);
  for (int64_t u = 0; u < units; ++u) {
    double work = u == 0           ? s * h
                  : u == units - 1 ? output
                  : u % 2          ? attention
                                   : mlp;
    before[u + 1] = before[u] + work;
  }
  llvm::SmallVector<int64_t> begin{0};
  for (int64_t k = 1; k < chunks; ++k) {
    double target =
        before[units] * static_cast<double>(k) / static_cast<double>(chunks);
    // The FLOPs before a unit only grow: the closest start is at the
    // target or just before it (the earlier on a tie, as chooseCuts
    // takes), within the starts that leave a unit to every later chunk.
    int64_t lo = begin.back() + 1, hi = units - (chunks - k);
    int64_t best =
        std::lower_bound(before.begin() + lo, before.begin() + hi + 1, target) -
        before.begin();
    if (best > hi)
      best = hi;
    else if (best > lo && std::abs(before[best - 1] - target) <=
                              std::abs(before[best] - target))
      --best;
    begin.push_back(best);
  }
  begin.push_back(units);
  llvm::SmallVector<HalfCounts> result(chunks);
  for (int64_t k = 0; k < chunks; ++k)
    for (int64_t u = std::max<int64_t>(begin[k], 1);
         u < std::min(begin[k + 1], units - 1); ++u)
      ++(u % 2 ? result[k].attention : result[k].mlp);
  return result;
}

/// Megatron-LM's chunks: whole layers, the extra ones on the first chunks.
static llvm::SmallVector<HalfCounts>
wholeLayerChunks(const TransformerSpec &spec, int64_t chunks) {
  llvm::SmallVector<HalfCounts> result(chunks);
  for (int64_t k = 0; k < chunks; ++k) {
    int64_t layers = spec.layers / chunks + (k < spec.layers % chunks ? 1 : 0);
    result[k] = {layers, layers};
  }
  return result;
}

namespace {
/// Each pipeline stage's share of the model: its block halves, parameters
/// and memory.
class StageShares {
public:
  StageShares(const Context &c)
      : c(c), params(layerParamCount(c.spec, c.plan)),
        attentionParams(attentionParamCount(c.spec, c.plan)),
        embeddingParams(static_cast<double>(c.spec.vocab) * c.h / c.t),
        act(layerActivationBytes(c.spec, c.plan)) {
    int64_t p = c.plan.pp;
    stages.resize(p);
    // A device holds chunks stage, stage + p, ... (the interleaved
    // placement).
    int64_t chunks = p * c.plan.vpp;
    for (auto [chunk, halves] :
         llvm::enumerate(c.cluster.software == Software::Megatron
                             ? wholeLayerChunks(c.spec, chunks)
                             : pipelineChunks(c.spec, chunks))) {
      HalfCounts &stage = stages[chunk % p];
      stage.attention += halves.attention;
      stage.mlp += halves.mlp;
    }
  }

  const HalfCounts &halvesOn(int64_t stage) const { return stages[stage]; }

  /// Parameters on one device of `stage`; `expert` receives the experts'.
  double paramsOn(int64_t stage, double &expert) const {
    int64_t p = c.plan.pp;
    const HalfCounts &halves = stages[stage];
    expert = halves.of(attentionParams.expert, params.expert);
    double total = halves.of(attentionParams.total(), params.total());
    if (stage == 0)
      total += embeddingParams;
    if (stage == p - 1) {
      if (p > 1 || !c.spec.tiedEmbeddings)
        total += embeddingParams; // Output layer (a tied copy if p > 1).
      total += 2 * c.h;
    }
    return total;
  }

  /// Model states, the activations of the micro-batches in flight, the
  /// last stage's logits.
  MemoryBreakdown memoryOf(int64_t stage) const {
    const TransformerSpec &spec = c.spec;
    const ParallelPlan &plan = c.plan;
    int64_t p = plan.pp;
    double mask = spec.dropout ? 1 : 0;
    double x = c.tokens * c.h;
    MemoryBreakdown mem;
    double expert = 0;
    double total = paramsOn(stage, expert);
    StateBytes states = modelStateBytes(spec, plan, total, expert);
    mem.params = states.params;
    mem.grads = states.grads;
    mem.optimizer = states.optimizer;
    double inFlight = microBatchesInFlight(
        plan.schedule, p, plan.microBatches(), plan.vpp, stage);
    mem.activations =
        inFlight * stages[stage].of(act.attentionStored, act.stored);
    if (stage == 0) // Embedding dropout mask.
      mem.activations += inFlight * mask * x * c.rep;
    if (stage == p - 1) // Final norm input; fp16 logits and fp32 softmax.
      mem.activations += c.e * x * c.rep + (c.e + 4) * c.tokens *
                                               static_cast<double>(spec.vocab) /
                                               c.t;
    mem.workspace = kRuntimeBytes + act.working;
    if (plan.zero >= 3) // This block's and the prefetched block's weights.
      mem.workspace += 2 * c.e * params.total() + c.e * params.total();
    mem.reserveForFragmentation();
    return mem;
  }

  const double &embedding() const { return embeddingParams; }

private:
  const Context &c;
  LayerParams params, attentionParams;
  double embeddingParams;
  LayerActivations act;
  llvm::SmallVector<HalfCounts, 8> stages;
};
} // namespace

/// Once per step: the data-parallel reduction on stage 0 (its last backward
/// ends the step), a tied embedding's sum and the optimizer step.
static void addOncePerStep(const Context &c, const StageShares &shares,
                           StepCost &step) {
  const ParallelPlan &plan = c.plan;
  const int64_t p = plan.pp;
  double expert0 = 0;
  double params0 = shares.paramsOn(0, expert0);
  double dense0 = params0 - expert0;
  // Stage 0's last backward, recompute included, and its first forward.
  const StageCost &first = step.stages.front();
  double lastBackward = first.kernels - first.forward;
  double firstForward = first.forward;
  DataParallelCost dpCost = dataParallelCost(
      plan, c.e * dense0, c.e * expert0, c.e, c.gradGroup, c.expertGradGroup,
      lastBackward, firstForward, c.cluster);
  step.comm.dp = dpCost.time;
  step.exposed.dp = dpCost.exposed;
  // Tied embedding: first and last stage sum their copies' gradients.
  if (p > 1 && c.spec.tiedEmbeddings) {
    GroupPlacement ends = placeGroup(2, plan.stride(MeshAxis::PP) * (p - 1),
                                     c.cluster.gpusPerNode);
    step.comm.pp = step.exposed.pp =
        c.coll(Collective::AllReduce, c.e * shares.embedding(), ends);
  }
  double optimizerShard =
      plan.zero >= 1 ? dense0 / static_cast<double>(plan.dp * plan.cp) +
                           expert0 * static_cast<double>(plan.ep) /
                               static_cast<double>(plan.dp * plan.cp)
                     : params0;
  step.optimizerS = optimizerStepSeconds(optimizerShard, c.e, c.cluster);
}

/// Tokens, model and hardware FLOPs (recompute included) per step.
static void setStepFlops(const Context &c, StepCost &step) {
  const TransformerSpec &spec = c.spec;
  const ParallelPlan &plan = c.plan;
  double sequences = static_cast<double>(plan.globalBatch);
  step.tokens = sequences * static_cast<double>(spec.seqLen);
  step.modelFlops = trainingFlopsPerToken(spec) * step.tokens;
  double recomputeFlops = 0;
  if (plan.recompute == Recompute::Full)
    recomputeFlops = blockForwardFlops(spec);
  else if (plan.recompute == Recompute::Selective && !plan.fusedAttention)
    recomputeFlops =
        4 * c.s * c.s * static_cast<double>(spec.heads * spec.headDim());
  step.hwFlops = step.modelFlops +
                 sequences * static_cast<double>(spec.layers) * recomputeFlops;
  step.gpus = static_cast<double>(plan.gpus());
  step.peakFlops = c.cluster.peakFlops(spec.dtype);
}

llvm::Expected<Prediction> dtc::predict(const TransformerSpec &spec,
                                        const ParallelPlan &plan,
                                        const Cluster &cluster,
                                        std::vector<StageDetail> *stages) {
  if (llvm::Error err = validatePlan(spec, plan, cluster))
    return std::move(err);

  Context c(spec, plan, cluster);
  const int64_t p = plan.pp, v = plan.vpp;
  const double vd = static_cast<double>(v);
  int64_t chunks = 1;
  BlockHalves block = blockWithTpChunks(c, chunks);
  EdgeCost embed = embeddingCost(c), output = outputCost(c, chunks);

  // Pipeline p2p: the stage boundary activation. Megatron-LM splits it
  // over the TP ranks (scatter-gather, or SP) and re-gathers it on NVLink;
  // dtc's pipeline pass sends it whole from every TP rank (its boundary
  // layout splits rows over the data axes only).
  double p2p = 0;
  if (p > 1) {
    double bytes = c.e * c.tokens * c.h;
    if (cluster.software == Software::Dtc) {
      p2p = c.coll(Collective::SendRecv, bytes, c.ppPair);
    } else {
      p2p = c.coll(Collective::SendRecv, bytes / c.t, c.ppPair);
      if (plan.tp > 1 && !plan.sequenceParallel)
        p2p += c.coll(Collective::AllGather, bytes, c.tpGroup);
    }
  }

  StageShares shares(c);
  StepCost step;
  step.microBatches = plan.microBatches();
  step.chunksPerStage = v;
  step.schedule = plan.schedule;
  step.tpCommChunks = chunks;
  for (int64_t i = 0; i < p; ++i) {
    BlockCost blocks = shares.halvesOn(i).of(block);
    StageCost stage;
    stage.forward = blocks.forward + (i == 0 ? embed.forward : 0) +
                    (i == p - 1 ? output.forward : 0);
    stage.weightGrad = blocks.weightGrad;
    stage.kernels = blocks.forward + blocks.backward + blocks.recompute +
                    (i == 0 ? embed.compute : 0) +
                    (i == p - 1 ? output.compute : 0);
    stage.comm = blocks.comm;
    stage.exposed = blocks.exposed;
    for (auto [edge, on] : {std::pair{&embed, i == 0}, {&output, i == p - 1}})
      if (on) {
        stage.comm.tp += edge->tpTotal;
        stage.exposed.tp += edge->tp;
      }
    // Each chunk receives its input and its output gradient once.
    stage.comm.pp = stage.exposed.pp = 2 * vd * p2p;
    stage.time = stage.kernels + stage.exposed.total();
    stage.memory = shares.memoryOf(i);
    step.stages.push_back(stage);
  }
  addOncePerStep(c, shares, step);
  setStepFlops(c, step);
  return composeStep(step, cluster, stages);
}

void MemoryBreakdown::reserveForFragmentation() {
  reserve = kFragmentationReserve * (activations + workspace);
}

static llvm::json::Object commJson(const CommTimes &comm) {
  return llvm::json::Object{{"dp", comm.dp},
                            {"tp", comm.tp},
                            {"pp", comm.pp},
                            {"cp", comm.cp},
                            {"ep", comm.ep}};
}

llvm::json::Object dtc::predictionToJson(const Prediction &p) {
  llvm::json::Object result{
      {"step_time_s", p.stepTimeS},
      {"tokens_per_s", p.tokensPerS},
      {"tflops_per_gpu", p.tflopsPerGpu},
      {"hw_tflops_per_gpu", p.hwTflopsPerGpu},
      {"mfu", p.mfu},
      {"hfu", p.hfu},
      {"bubble_fraction", p.bubbleFraction},
      {"stage_imbalance", p.stageImbalance},
      {"compute_time_s", p.computeTimeS},
      {"optimizer_time_s", p.optimizerTimeS},
      {"memory_per_gpu_bytes", p.memoryPerGpuBytes},
      {"memory_breakdown",
       llvm::json::Object{{"params", p.memory.params},
                          {"grads", p.memory.grads},
                          {"optimizer", p.memory.optimizer},
                          {"activations", p.memory.activations},
                          {"workspace", p.memory.workspace},
                          {"reserve", p.memory.reserve}}},
      {"peak_memory_stage", p.peakMemoryStage},
      {"comm_time_s", commJson(p.commTime)},
      {"comm_exposed_s", commJson(p.commExposed)},
      {"comm_hidden_s", commJson(p.commHidden())},
      {"fits", p.fits},
  };
  if (!p.fits)
    result["reason"] = p.reason;
  return result;
}
