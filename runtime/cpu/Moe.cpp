//===- Moe.cpp - Mixture-of-experts routing, dispatch and combine ---------===//
//
// Reference kernels of the dtc.moe_* ops (DtcOps.td, docs/moe.md). Every
// sequence routes on its own (capacity is per sequence), so the kernels
// split the batch across threads; within a sequence the order of every sum
// is fixed, so results do not depend on the thread count.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuKernels.h"

#include "runtime/core/Moe.h"
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/Parallel.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <vector>

namespace dtc::runtime::cpu {

namespace {

/// One sequence's routing: scores, each token's top-k experts (by score,
/// ties to the lower index), which choices kept a slot, and the slots.
struct SequenceRoute {
  std::vector<float> scores;   // [s, E]
  std::vector<int64_t> chosen; // [s, k]
  std::vector<char> kept;      // [s, k]
  std::vector<int64_t> picks;  // [E]: choices per expert, before drops
  std::vector<int64_t> slots;  // [E, C], -1 when empty

  SequenceRoute(const MoeRouting &p, const float *logits) {
    int64_t s = p.positions, e = p.experts, k = p.topK;
    scores.resize(s * e);
    for (int64_t t = 0; t < s; ++t) {
      const float *row = logits + t * e;
      float *out = scores.data() + t * e;
      if (p.sigmoid) {
        for (int64_t i = 0; i < e; ++i)
          out[i] = 1.0f / (1.0f + std::exp(-row[i]));
        continue;
      }
      float max = row[0];
      for (int64_t i = 1; i < e; ++i)
        max = std::max(max, row[i]);
      float sum = 0;
      for (int64_t i = 0; i < e; ++i)
        sum += out[i] = std::exp(row[i] - max);
      for (int64_t i = 0; i < e; ++i)
        out[i] /= sum;
    }
    // Choice j is the first unchosen expert of the highest score, as in
    // the CUDA kernel. No sort: a NaN score compares false both ways, which
    // is no strict weak order. Here a NaN is chosen when it is the first
    // unchosen expert and passed over otherwise, so every token still gets
    // k distinct experts.
    chosen.resize(s * k);
    std::vector<char> taken(e);
    for (int64_t t = 0; t < s; ++t) {
      const float *row = scores.data() + t * e;
      std::fill(taken.begin(), taken.end(), 0);
      for (int64_t j = 0; j < k; ++j) {
        int64_t best = -1;
        for (int64_t x = 0; x < e; ++x)
          if (!taken[x] && (best < 0 || row[x] > row[best]))
            best = x;
        taken[best] = 1;
        chosen[t * k + j] = best;
      }
    }
    // Slots fill by choice rank, then position (GShard's priority).
    kept.assign(s * k, 0);
    picks.assign(e, 0);
    slots.assign(e * p.capacity, -1);
    for (int64_t j = 0; j < k; ++j)
      for (int64_t t = 0; t < s; ++t) {
        int64_t x = chosen[t * k + j];
        if (picks[x] < p.capacity) {
          slots[x * p.capacity + picks[x]] = t;
          kept[t * k + j] = 1;
        }
        ++picks[x];
      }
  }

  /// The sum of the chosen scores of token `t` (the normalizer).
  float chosenSum(const MoeRouting &p, int64_t t) const {
    float sum = 0;
    for (int64_t j = 0; j < p.topK; ++j)
      sum += scores[t * p.experts + chosen[t * p.topK + j]];
    return sum;
  }
};

llvm::Error routeKernel(const KernelCall &call) {
  llvm::Expected<MoeRouting> routing = readMoeRoute(call);
  if (!routing)
    return routing.takeError();
  const MoeRouting &p = *routing;
  const TensorRef &logits = call.input(0);
  int64_t batch = p.batch, s = p.positions, e = p.experts;
  F32In in(logits);
  F32Out gates(call.output(0)), aux(call.output(2));
  int64_t *slots = call.output(1).as<int64_t>();
  // The routing figures of dtc run's metrics (not of a recomputed route).
  MoeRoutingStats::Layer *stats = nullptr;
  std::mutex statsMutex;
  if (ExecutionContext *context = call.context();
      context && context->moeRouting && call.has("layer") &&
      !call.flag("recomputed")) {
    stats = &context->moeRouting->layers[call.i64("layer")];
    stats->expertChoices.resize(e, 0.0);
  }
  parallelFor(
      batch, s * e * kWorkDivide, [&](int64_t rangeBegin, int64_t rangeEnd) {
        for (int64_t b = rangeBegin; b < rangeEnd; ++b) {
          SequenceRoute route(p, in.data() + b * s * e);
          float *g = gates.data() + b * s * e;
          std::fill(g, g + s * e, 0.0f);
          for (int64_t t = 0; t < s; ++t) {
            float norm = p.normalize ? route.chosenSum(p, t) : 1.0f;
            for (int64_t j = 0; j < p.topK; ++j)
              if (route.kept[t * p.topK + j]) {
                int64_t x = route.chosen[t * p.topK + j];
                g[t * e + x] = route.scores[t * e + x] / norm;
              }
          }
          std::copy(route.slots.begin(), route.slots.end(),
                    slots + b * e * p.capacity);
          // E * sum_e f_e P_e: f_e the share of the choices, P_e the mean
          // score; 0 for a sequence of no tokens.
          double loss = 0;
          for (int64_t x = 0; x < e && s > 0; ++x) {
            double meanScore = 0;
            for (int64_t t = 0; t < s; ++t)
              meanScore += route.scores[t * e + x];
            loss += double(route.picks[x]) / double(s * p.topK) * meanScore / s;
          }
          aux.data()[b] = static_cast<float>(e * loss);
          if (stats) {
            std::lock_guard<std::mutex> lock(statsMutex);
            for (int64_t x = 0; x < e; ++x) {
              stats->expertChoices[x] += route.picks[x];
              stats->dropped +=
                  std::max<int64_t>(0, route.picks[x] - p.capacity);
            }
            stats->auxSum += aux.data()[b];
            stats->sequences += 1;
          }
        }
      });
  gates.commit();
  aux.commit();
  return llvm::Error::success();
}

llvm::Error routeGradKernel(const KernelCall &call) {
  llvm::Expected<MoeRouting> routing = readMoeRouteGrad(call);
  if (!routing)
    return routing.takeError();
  const MoeRouting &p = *routing;
  const TensorRef &logits = call.input(0);
  int64_t batch = p.batch, s = p.positions, e = p.experts, k = p.topK;
  F32In in(logits), gatesGrad(call.input(1)), auxGrad(call.input(2));
  F32Out out(call.output(0));
  parallelFor(
      batch, s * e * kWorkDivide, [&](int64_t rangeBegin, int64_t rangeEnd) {
        for (int64_t b = rangeBegin; b < rangeEnd; ++b) {
          SequenceRoute route(p, in.data() + b * s * e);
          const float *gg = gatesGrad.data() + b * s * e;
          std::vector<float> dScores(s * e, 0.0f);
          // Auxiliary loss: d/dp[t, e] of E * sum f_e mean_t p = E f_e / s.
          float auxScale = auxGrad[b] * float(e) / float(s);
          for (int64_t x = 0; x < e; ++x) {
            float share = float(route.picks[x]) / float(s * k);
            for (int64_t t = 0; t < s; ++t)
              dScores[t * e + x] = auxScale * share;
          }
          for (int64_t t = 0; t < s; ++t) {
            const int64_t *c = route.chosen.data() + t * k;
            const char *kept = route.kept.data() + t * k;
            float *d = dScores.data() + t * e;
            if (!p.normalize) {
              for (int64_t j = 0; j < k; ++j)
                if (kept[j])
                  d[c[j]] += gg[t * e + c[j]];
              continue;
            }
            // gate_j = p_j / S over the chosen: dp_i += G_i / S - sum G_j p_j /
            // S^2
            float sum = route.chosenSum(p, t), weighted = 0;
            for (int64_t j = 0; j < k; ++j)
              if (kept[j]) {
                d[c[j]] += gg[t * e + c[j]] / sum;
                weighted += gg[t * e + c[j]] * route.scores[t * e + c[j]];
              }
            for (int64_t j = 0; j < k; ++j)
              d[c[j]] -= weighted / (sum * sum);
          }
          float *dl = out.data() + b * s * e;
          for (int64_t t = 0; t < s; ++t) {
            const float *pr = route.scores.data() + t * e;
            const float *d = dScores.data() + t * e;
            if (p.sigmoid) {
              for (int64_t x = 0; x < e; ++x)
                dl[t * e + x] = d[x] * pr[x] * (1.0f - pr[x]);
              continue;
            }
            float dot = 0;
            for (int64_t x = 0; x < e; ++x)
              dot += pr[x] * d[x];
            for (int64_t x = 0; x < e; ++x)
              dl[t * e + x] = pr[x] * (d[x] - dot);
          }
        }
      });
  out.commit();
  return llvm::Error::success();
}

/// Checks every slot (of slots readMoe* accepted) is -1 or a position.
llvm::Error checkSlotValues(const KernelCall &call, const TensorRef &slots,
                            int64_t positions) {
  for (int64_t i = 0, n = slots.numElements(); i < n; ++i) {
    int64_t t = loadAsInt(slots, i);
    if (t < -1 || t >= positions)
      return call.error("slot " + std::to_string(i) + " holds position " +
                        std::to_string(t) + ", outside [-1, " +
                        std::to_string(positions) + ")");
  }
  return llvm::Error::success();
}

llvm::Error dispatchKernel(const KernelCall &call) {
  llvm::Expected<MoeSlots> shape = readMoeDispatch(call);
  if (!shape)
    return shape.takeError();
  const TensorRef &x = call.input(0), &slots = call.input(1);
  int64_t batch = shape->batch, s = shape->positions, e = shape->experts,
          c = shape->capacity, h = shape->hidden;
  if (auto err = checkSlotValues(call, call.input(1), s))
    return err;
  F32In in(x);
  F32Out out(call.output(0));
  parallelFor(batch * e * c, h, [&](int64_t rangeBegin, int64_t rangeEnd) {
    for (int64_t row = rangeBegin; row < rangeEnd; ++row) {
      int64_t t = loadAsInt(slots, row), b = row / (e * c);
      float *dst = out.data() + row * h;
      if (t < 0)
        std::fill(dst, dst + h, 0.0f);
      else
        std::copy_n(in.data() + (b * s + t) * h, h, dst);
    }
  });
  out.commit();
  return llvm::Error::success();
}

/// out[b, t] = sum over (e, c) with slots[b, e, c] = t of weight * rows[b,
/// e, c], in (e, c) order; weight is gates[b, t, e] or 1.
void gatherSum(const float *rows, const TensorRef &slots, const float *gates,
               int64_t batch, int64_t s, int64_t e, int64_t c, int64_t h,
               float *out) {
  parallelFor(batch, e * c * h, [&](int64_t rangeBegin, int64_t rangeEnd) {
    for (int64_t b = rangeBegin; b < rangeEnd; ++b) {
      float *y = out + b * s * h;
      std::fill(y, y + s * h, 0.0f);
      for (int64_t x = 0; x < e; ++x)
        for (int64_t slot = 0; slot < c; ++slot) {
          int64_t t = loadAsInt(slots, (b * e + x) * c + slot);
          if (t < 0)
            continue;
          float w = gates ? gates[(b * s + t) * e + x] : 1.0f;
          const float *r = rows + ((b * e + x) * c + slot) * h;
          for (int64_t i = 0; i < h; ++i)
            y[t * h + i] += w * r[i];
        }
    }
  });
}

llvm::Error combineKernel(const KernelCall &call) {
  llvm::Expected<MoeSlots> shape = readMoeCombine(call);
  if (!shape)
    return shape.takeError();
  const TensorRef &experts = call.input(0), &slots = call.input(1),
                  &gates = call.input(2);
  int64_t batch = shape->batch, s = shape->positions, e = shape->experts,
          c = shape->capacity, h = shape->hidden;
  if (auto err = checkSlotValues(call, call.input(1), s))
    return err;
  F32In rows(experts), g(gates);
  F32Out out(call.output(0));
  gatherSum(rows.data(), slots, g.data(), batch, s, e, c, h, out.data());
  out.commit();
  return llvm::Error::success();
}

llvm::Error dispatchGradKernel(const KernelCall &call) {
  llvm::Expected<MoeSlots> shape = readMoeDispatchGrad(call);
  if (!shape)
    return shape.takeError();
  const TensorRef &grad = call.input(0), &slots = call.input(1);
  int64_t batch = shape->batch, s = shape->positions, e = shape->experts,
          c = shape->capacity, h = shape->hidden;
  if (auto err = checkSlotValues(call, call.input(1), s))
    return err;
  F32In rows(grad);
  F32Out out(call.output(0));
  gatherSum(rows.data(), slots, nullptr, batch, s, e, c, h, out.data());
  out.commit();
  return llvm::Error::success();
}

llvm::Error combineGradKernel(const KernelCall &call) {
  llvm::Expected<MoeSlots> shape = readMoeCombineGrad(call);
  if (!shape)
    return shape.takeError();
  const TensorRef &experts = call.input(0), &slots = call.input(1),
                  &gates = call.input(2), &grad = call.input(3);
  int64_t batch = shape->batch, s = shape->positions, e = shape->experts,
          c = shape->capacity, h = shape->hidden;
  if (auto err = checkSlotValues(call, call.input(1), s))
    return err;
  F32In rows(experts), g(gates), dy(grad);
  F32Out dRows(call.output(0)), dGates(call.output(1));
  parallelFor(batch, 2 * e * c * h, [&](int64_t rangeBegin, int64_t rangeEnd) {
    for (int64_t b = rangeBegin; b < rangeEnd; ++b) {
      float *dg = dGates.data() + b * s * e;
      std::fill(dg, dg + s * e, 0.0f);
      for (int64_t x = 0; x < e; ++x)
        for (int64_t slot = 0; slot < c; ++slot) {
          int64_t row = (b * e + x) * c + slot;
          int64_t t = loadAsInt(slots, row);
          float *dr = dRows.data() + row * h;
          if (t < 0) {
            std::fill(dr, dr + h, 0.0f);
            continue;
          }
          const float *r = rows.data() + row * h;
          const float *d = dy.data() + (b * s + t) * h;
          float w = g[(b * s + t) * e + x], dot = 0;
          for (int64_t i = 0; i < h; ++i) {
            dr[i] = w * d[i];
            dot += r[i] * d[i];
          }
          dg[t * e + x] += dot;
        }
    }
  });
  dRows.commit();
  dGates.commit();
  return llvm::Error::success();
}

} // namespace

void registerMoeKernels(KernelRegistry &registry) {
  registry.add("dtc.moe_route", routeKernel);
  registry.add("dtc.moe_route_grad", routeGradKernel);
  registry.add("dtc.moe_dispatch", dispatchKernel);
  registry.add("dtc.moe_dispatch_grad", dispatchGradKernel);
  registry.add("dtc.moe_combine", combineKernel);
  registry.add("dtc.moe_combine_grad", combineGradKernel);
}

} // namespace dtc::runtime::cpu
