//===- Interpreter.cpp - reference interpreter of the moe dialect ---------===//

#include "Interpreter.h"
#include "AttentionMath.h"

#include "moe/Dialect/MoE/MoEOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <type_traits>
#include <random>

using namespace mlir;
using namespace mlir::moe;
using ::moec::reference::Tensor;
using namespace ::moec::reference;

Tensor Tensor::zeros(std::vector<int64_t> shape) {
  Tensor t;
  t.shape = std::move(shape);
  t.data.assign(static_cast<size_t>(t.numel()), 0.0);
  return t;
}

Tensor Tensor::ids(std::vector<int64_t> shape, std::vector<int32_t> values) {
  Tensor t;
  t.shape = std::move(shape);
  t.ints = std::move(values);
  t.isInt = true;
  return t;
}

int64_t Tensor::numel() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t(1), std::multiplies<int64_t>());
}

namespace {
using Vec = std::vector<double>;

std::vector<int64_t> shapeOf(Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  return std::vector<int64_t>(type.getShape().begin(), type.getShape().end());
}

/// Rows of a [..., n] tensor.
int64_t rows(const Tensor &t) { return t.numel() / t.shape.back(); }

/// c[m, n] (+)= a[m, k] * b[k, n], with optional transposes of a and b.
void matmul(const double *a, const double *b, double *c, int64_t m, int64_t k, int64_t n,
            bool transA, bool transB, bool accumulate) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = accumulate ? c[i * n + j] : 0.0;
      for (int64_t l = 0; l < k; ++l)
        sum += (transA ? a[l * m + i] : a[i * k + l]) * (transB ? b[j * k + l] : b[l * n + j]);
      c[i * n + j] = sum;
    }
}

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

/// Activation and its derivative.
double act(Activation a, double z) {
  switch (a) {
  case Activation::swiglu:
    return z * sigmoid(z); // silu, applied to the gate projection
  case Activation::gelu: {
    const double c = std::sqrt(2.0 / M_PI);
    return 0.5 * z * (1.0 + std::tanh(c * (z + 0.044715 * z * z * z)));
  }
  case Activation::relu:
    return z > 0 ? z : 0.0;
  }
  return 0;
}
double actGrad(Activation a, double z) {
  switch (a) {
  case Activation::swiglu: {
    double s = sigmoid(z);
    return s * (1.0 + z * (1.0 - s));
  }
  case Activation::gelu: {
    const double c = std::sqrt(2.0 / M_PI);
    double t = std::tanh(c * (z + 0.044715 * z * z * z));
    return 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * z * z);
  }
  case Activation::relu:
    return z > 0 ? 1.0 : 0.0;
  }
  return 0;
}

/// One FFN on `m` rows: y = act(...) @ down. Pointers into [D,F] etc.
void ffnForward(Activation a, const double *x, const double *up, const double *down,
                const double *gate, double *y, int64_t m, int64_t d, int64_t f) {
  Vec hu(m * f), hg, h(m * f);
  matmul(x, up, hu.data(), m, d, f, false, false, false);
  if (a == Activation::swiglu) {
    hg.resize(m * f);
    matmul(x, gate, hg.data(), m, d, f, false, false, false);
    for (int64_t i = 0; i < m * f; ++i)
      h[i] = act(a, hg[i]) * hu[i];
  } else {
    for (int64_t i = 0; i < m * f; ++i)
      h[i] = act(a, hu[i]);
  }
  matmul(h.data(), down, y, m, f, d, false, false, false);
}

void ffnBackward(Activation a, const double *x, const double *up, const double *down,
                 const double *gate, const double *dy, double *dx, double *dup, double *ddown,
                 double *dgate, int64_t m, int64_t d, int64_t f) {
  Vec hu(m * f), hg, h(m * f), dh(m * f), dhu(m * f), dhg;
  matmul(x, up, hu.data(), m, d, f, false, false, false);
  if (a == Activation::swiglu) {
    hg.resize(m * f);
    dhg.resize(m * f);
    matmul(x, gate, hg.data(), m, d, f, false, false, false);
    for (int64_t i = 0; i < m * f; ++i)
      h[i] = act(a, hg[i]) * hu[i];
  } else {
    for (int64_t i = 0; i < m * f; ++i)
      h[i] = act(a, hu[i]);
  }
  matmul(h.data(), dy, ddown, f, m, d, true, false, true);  // h^T dy
  matmul(dy, down, dh.data(), m, d, f, false, true, false); // dy down^T
  for (int64_t i = 0; i < m * f; ++i) {
    if (a == Activation::swiglu) {
      dhu[i] = dh[i] * act(a, hg[i]);
      dhg[i] = dh[i] * hu[i] * actGrad(a, hg[i]);
    } else {
      dhu[i] = dh[i] * actGrad(a, hu[i]);
    }
  }
  matmul(x, dhu.data(), dup, d, m, f, true, false, true);
  matmul(dhu.data(), up, dx, m, f, d, false, true, false);
  if (a == Activation::swiglu) {
    matmul(x, dhg.data(), dgate, d, m, f, true, false, true);
    matmul(dhg.data(), gate, dx, m, f, d, false, true, true);
  }
}

/// The shapes of a moe.attention or moe.attention_grad.
template <typename OpT> AttentionDims dimsOf(OpT o) {
  auto q = cast<RankedTensorType>(o.getQ().getType()).getShape();
  auto heads = static_cast<int64_t>(o.getNumHeads());
  return {q[0], q[1], heads, static_cast<int64_t>(o.getNumKvHeads()), q[2] / heads, q[2] / heads};
}

template <typename OpT> std::optional<double> thetaOf(OpT o) {
  if (auto t = o.getRopeTheta())
    return t->convertToFloat();
  return std::nullopt;
}

/// Token-slot assignment of dispatch/combine: slot or -1 (dropped).
std::vector<int64_t> assignSlots(const Tensor &experts, int64_t numExperts, int64_t capacity,
                                 std::string &error) {
  std::vector<int64_t> slots(experts.ints.size(), -1), count(numExperts, 0);
  for (size_t i = 0; i < experts.ints.size(); ++i) {
    int32_t e = experts.ints[i];
    if (e < 0 || e >= numExperts) {
      error = "expert index " + std::to_string(e) + " out of range";
      return {};
    }
    if (count[e] < capacity)
      slots[i] = count[e]++;
  }
  return slots;
}

/// Routing of one token: scores, selection, gates; shared by router and
/// router_grad.
struct Routing {
  Vec logits, scores;       // [E]
  std::vector<int64_t> sel; // [k]
  Vec gates;                // [k]
  double selectedSum = 1.0; // sum of selected scores (renormalisation)
};

/// Group-limited routing: `groups` equal contiguous groups of experts, of
/// which a token keeps its `topk` best (ties to the lower group).
struct ExpertGroups {
  int64_t groups = 1, topk = 1;
};

/// The experts a token may select: all, or those of its best groups, each
/// group scored from the selection keys by the scoring's rule (softmax: the
/// largest key; sigmoid: the sum of the two largest, the one key of a
/// one-expert group).
std::vector<bool> allowedExperts(const Vec &keys, Scoring scoring, ExpertGroups eg) {
  int64_t e = static_cast<int64_t>(keys.size());
  if (eg.groups <= 1)
    return std::vector<bool>(e, true);
  int64_t per = e / eg.groups;
  Vec groupScore(eg.groups);
  for (int64_t g = 0; g < eg.groups; ++g) {
    Vec mine(keys.begin() + g * per, keys.begin() + (g + 1) * per);
    std::sort(mine.begin(), mine.end(), std::greater<double>());
    groupScore[g] = scoring == Scoring::softmax || per == 1 ? mine[0] : mine[0] + mine[1];
  }
  std::vector<int64_t> order(eg.groups);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return groupScore[a] > groupScore[b]; });
  std::vector<bool> allowed(e, false);
  for (int64_t i = 0; i < eg.topk; ++i)
    for (int64_t c = 0; c < per; ++c)
      allowed[order[i] * per + c] = true;
  return allowed;
}

Routing route(const double *x, const Tensor &w, const Tensor *bias, int64_t d, int64_t e, int64_t k,
              Scoring scoring, bool renormalize, double scaling, ExpertGroups eg) {
  Routing r;
  r.logits.assign(e, 0.0);
  matmul(x, w.data.data(), r.logits.data(), 1, d, e, false, false, false);
  r.scores.resize(e);
  if (scoring == Scoring::softmax) {
    double mx = *std::max_element(r.logits.begin(), r.logits.end()), sum = 0;
    for (int64_t i = 0; i < e; ++i)
      sum += (r.scores[i] = std::exp(r.logits[i] - mx));
    for (double &s : r.scores)
      s /= sum;
  } else {
    for (int64_t i = 0; i < e; ++i)
      r.scores[i] = sigmoid(r.logits[i]);
  }
  std::vector<int64_t> order(e);
  std::iota(order.begin(), order.end(), 0);
  Vec keys(e);
  for (int64_t i = 0; i < e; ++i)
    keys[i] = r.scores[i] + (bias ? bias->data[i] : 0.0);
  // Experts outside the token's best groups sort after every allowed one.
  std::vector<bool> allowed = allowedExperts(keys, scoring, eg);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    if (allowed[a] != allowed[b])
      return static_cast<bool>(allowed[a]);
    return keys[a] > keys[b];
  });
  r.sel.assign(order.begin(), order.begin() + k);
  r.selectedSum = 0;
  for (int64_t i : r.sel)
    r.selectedSum += r.scores[i];
  for (int64_t i : r.sel)
    r.gates.push_back(scaling * r.scores[i] / (renormalize ? r.selectedSum : 1.0));
  return r;
}

/// Balancing probabilities p (softmax scores, or sigmoid scores normalised).
Vec balanceProbs(const Routing &r, Scoring scoring) {
  if (scoring == Scoring::softmax)
    return r.scores;
  double sum = std::accumulate(r.scores.begin(), r.scores.end(), 0.0);
  Vec p(r.scores);
  for (double &v : p)
    v /= sum;
  return p;
}

double logSumExp(const Vec &v) {
  double mx = *std::max_element(v.begin(), v.end()), sum = 0;
  for (double x : v)
    sum += std::exp(x - mx);
  return mx + std::log(sum);
}

class Runner {
public:
  using Moments = std::map<std::string, std::pair<std::vector<double>, std::vector<double>>>;
  using RouterLosses = std::vector<std::pair<double, double>>;
  Runner(std::map<std::string, Tensor> &params, Moments &moments, double &lastGlobalNorm,
         RouterLosses &routerLosses, std::string &error)
      : params(params), moments(moments), lastGlobalNorm(lastGlobalNorm),
        routerLosses(routerLosses), error(error) {}

  bool run(func::FuncOp fn, const std::vector<Tensor> &args, std::vector<Tensor> &results);

private:
  bool step(Operation *op);
  template <typename OpT> void routeTokens(OpT o);
  template <typename OpT> void runFFN(OpT o, bool grouped);
  template <typename OpT> void runFFNGrad(OpT o, bool grouped);
  Tensor &in(Value v) { return values[v]; }
  void out(Value v, Tensor t) { values[v] = std::move(t); }
  bool fail(Operation *op, const std::string &message) {
    error = op->getName().getStringRef().str() + ": " + message;
    return false;
  }

  std::map<std::string, Tensor> &params;
  Moments &moments;
  double &lastGlobalNorm;
  RouterLosses &routerLosses;
  std::string &error;
  llvm::DenseMap<Value, Tensor> values;
};

bool Runner::run(func::FuncOp fn, const std::vector<Tensor> &args, std::vector<Tensor> &results) {
  Block &body = fn.getBody().front();
  if (args.size() != body.getNumArguments()) {
    error = "expected " + std::to_string(body.getNumArguments()) + " arguments";
    return false;
  }
  for (auto [arg, value] : llvm::zip(body.getArguments(), args)) {
    if (value.shape != shapeOf(arg)) {
      error = "argument shape mismatch";
      return false;
    }
    values[arg] = value;
  }
  for (Operation &op : body.without_terminator())
    if (!step(&op))
      return false;
  results.clear();
  for (Value v : body.getTerminator()->getOperands())
    results.push_back(values[v]);
  return true;
}

/// The first token of each routing group, and the token count at the end:
/// `groups` equal groups, or the unequal `sizes` (tokens each).
static std::vector<int64_t> groupStarts(int64_t groups, DenseI64ArrayAttr sizes, int64_t t) {
  std::vector<int64_t> starts = {0};
  for (int64_t g = 0; g < groups; ++g)
    starts.push_back(starts.back() + (sizes ? sizes[g] : t / groups));
  return starts;
}

/// The group of token `i`.
static int64_t groupOf(const std::vector<int64_t> &starts, int64_t i) {
  return std::upper_bound(starts.begin(), starts.end(), i) - starts.begin() - 1;
}

/// The token groups the balancing loss averages over: the routing groups
/// `starts`, or with `perSequence` every sequence (x[b]) of `t` tokens.
static std::vector<int64_t> balanceStarts(bool perSequence, const Tensor &x, int64_t t,
                                          std::vector<int64_t> starts) {
  if (!perSequence)
    return starts;
  int64_t sequences = x.shape[0];
  return groupStarts(sequences, DenseI64ArrayAttr(), t);
}

/// Scores, top-k, gates and the balancing + z losses of a router or fused
/// gate: sets its gates, experts and aux-loss results.
template <typename OpT> void Runner::routeTokens(OpT o) {
  Tensor &x = in(o.getX()), &w = in(o.getWeight());
  Tensor *bias = o.getBias() ? &in(o.getBias()) : nullptr;
  int64_t d = w.shape[0], e = w.shape[1], k = o.getTopK(), t = rows(x);
  Tensor gates = Tensor::zeros(shapeOf(o.getGates()));
  Tensor experts = Tensor::ids(shapeOf(o.getExperts()), std::vector<int32_t>(t * k));
  // Routing groups: the balancing loss is the mean of the groups' losses
  // (weighted by their token shares: equal for equal groups).
  int64_t groups = 1;
  DenseI64ArrayAttr sizes;
  if constexpr (std::is_same_v<OpT, FusedGateOp>)
    groups = o.getGroups(), sizes = o.getGroupSizesAttr();
  std::vector<int64_t> starts =
      balanceStarts(o.getAuxPerSequence(), x, t, groupStarts(groups, sizes, t));
  groups = static_cast<int64_t>(starts.size()) - 1;
  Vec frac(groups * e, 0.0), meanP(groups * e, 0.0);
  double z = 0;
  for (int64_t i = 0; i < t; ++i) {
    Routing r =
        route(&x.data[i * d], w, bias, d, e, k, o.getScoring(), o.getRenormalize(),
              o.getRoutedScaling().convertToFloat(),
              {static_cast<int64_t>(o.getExpertGroups()), static_cast<int64_t>(o.getTopkGroups())});
    Vec p = balanceProbs(r, o.getScoring());
    int64_t g = groupOf(starts, i), tg = starts[g + 1] - starts[g];
    for (int64_t j = 0; j < k; ++j) {
      gates.data[i * k + j] = r.gates[j];
      experts.ints[i * k + j] = static_cast<int32_t>(r.sel[j]);
      frac[g * e + r.sel[j]] += 1.0 / (tg * k);
    }
    for (int64_t c = 0; c < e; ++c)
      meanP[g * e + c] += p[c] / tg;
    double lse = logSumExp(r.logits);
    z += lse * lse / t;
  }
  double aux = 0;
  for (int64_t c = 0; c < groups * e; ++c)
    aux += frac[c] * meanP[c] * (starts[c / e + 1] - starts[c / e]) / t;
  Tensor loss = Tensor::zeros({});
  loss.data[0] =
      o.getAuxLossCoef().convertToFloat() * e * aux + o.getZLossCoef().convertToFloat() * z;
  routerLosses.push_back({e * aux, z});
  out(o.getGates(), gates);
  out(o.getExperts(), experts);
  out(o.getAuxLoss(), loss);
}

/// ffn (one group of flattened rows) and expert_ffn (one group per expert
/// of capacity rows) share these.
template <typename OpT> void Runner::runFFN(OpT o, bool grouped) {
  Tensor &x = in(o.getX()), &up = in(o.getWUp()), &down = in(o.getWDown());
  const Tensor *gate = o.getWGate() ? &in(o.getWGate()) : nullptr;
  int64_t d = x.shape.back(), f = up.shape.back();
  int64_t groups = grouped ? x.shape[0] : 1, n = grouped ? x.shape[1] : rows(x);
  Tensor y = Tensor::zeros(x.shape);
  for (int64_t g = 0; g < groups; ++g)
    ffnForward(o.getActivation(), &x.data[g * n * d], &up.data[g * d * f], &down.data[g * f * d],
               gate ? &gate->data[g * d * f] : nullptr, &y.data[g * n * d], n, d, f);
  out(o.getResult(), y);
}

template <typename OpT> void Runner::runFFNGrad(OpT o, bool grouped) {
  Tensor &x = in(o.getX()), &up = in(o.getWUp()), &down = in(o.getWDown()), &dy = in(o.getDy());
  const Tensor *gate = o.getWGate() ? &in(o.getWGate()) : nullptr;
  int64_t d = x.shape.back(), f = up.shape.back();
  int64_t groups = grouped ? x.shape[0] : 1, n = grouped ? x.shape[1] : rows(x);
  Tensor dx = Tensor::zeros(x.shape), du = Tensor::zeros(up.shape), dd = Tensor::zeros(down.shape),
         dg = Tensor::zeros(gate ? up.shape : std::vector<int64_t>{0});
  for (int64_t g = 0; g < groups; ++g)
    ffnBackward(o.getActivation(), &x.data[g * n * d], &up.data[g * d * f], &down.data[g * f * d],
                gate ? &gate->data[g * d * f] : nullptr, &dy.data[g * n * d], &dx.data[g * n * d],
                &du.data[g * d * f], &dd.data[g * f * d], gate ? &dg.data[g * d * f] : nullptr, n,
                d, f);
  out(o.getDx(), dx);
  out(o.getDwUp(), du);
  out(o.getDwDown(), dd);
  if (gate)
    out(o.getDwGate(), dg);
}

bool Runner::step(Operation *op) {
  return llvm::TypeSwitch<Operation *, bool>(op)
      .Case([&](GetParamOp o) {
        auto it = params.find(o.getName().str());
        if (it == params.end())
          return fail(op, "no value for parameter " + o.getName().str());
        out(o.getResult(), it->second);
        return true;
      })
      .Case([&](FillOp o) {
        Tensor t = Tensor::zeros(shapeOf(o.getResult()));
        std::fill(t.data.begin(), t.data.end(), o.getValue().convertToDouble());
        out(o.getResult(), t);
        return true;
      })
      .Case([&](EmbeddingOp o) {
        Tensor &ids = in(o.getIds()), &table = in(o.getTable());
        int64_t d = table.shape[1], v = table.shape[0];
        Tensor y = Tensor::zeros(shapeOf(o.getResult()));
        for (size_t i = 0; i < ids.ints.size(); ++i) {
          if (ids.ints[i] < 0 || ids.ints[i] >= v)
            return fail(op, "token id " + std::to_string(ids.ints[i]) + " out of range");
          std::copy_n(&table.data[ids.ints[i] * d], d, &y.data[i * d]);
        }
        out(o.getResult(), y);
        return true;
      })
      .Case([&](EmbeddingGradOp o) {
        Tensor &ids = in(o.getIds()), &dy = in(o.getDy());
        Tensor dt = Tensor::zeros(shapeOf(o.getDtable()));
        int64_t d = dt.shape[1];
        for (size_t i = 0; i < ids.ints.size(); ++i)
          for (int64_t c = 0; c < d; ++c)
            dt.data[ids.ints[i] * d + c] += dy.data[i * d + c];
        out(o.getDtable(), dt);
        return true;
      })
      .Case([&](RMSNormOp o) {
        Tensor &x = in(o.getX()), &g = in(o.getGamma());
        double eps = o.getEpsilon().convertToFloat();
        int64_t d = g.shape[0]; // a group: the last dimension, or a head of it
        Tensor y = Tensor::zeros(x.shape);
        for (int64_t r = 0; r < static_cast<int64_t>(x.data.size()) / d; ++r) {
          double ms = 0;
          for (int64_t c = 0; c < d; ++c)
            ms += x.data[r * d + c] * x.data[r * d + c];
          double inv = 1.0 / std::sqrt(ms / d + eps);
          for (int64_t c = 0; c < d; ++c)
            y.data[r * d + c] = x.data[r * d + c] * inv * g.data[c];
        }
        out(o.getResult(), y);
        return true;
      })
      .Case([&](RMSNormGradOp o) {
        Tensor &x = in(o.getX()), &g = in(o.getGamma()), &dy = in(o.getDy());
        double eps = o.getEpsilon().convertToFloat();
        int64_t d = g.shape[0]; // a group: the last dimension, or a head of it
        Tensor dx = Tensor::zeros(x.shape), dg = Tensor::zeros(g.shape);
        for (int64_t r = 0; r < static_cast<int64_t>(x.data.size()) / d; ++r) {
          const double *xr = &x.data[r * d], *dyr = &dy.data[r * d];
          double ms = 0, ax = 0;
          for (int64_t c = 0; c < d; ++c) {
            ms += xr[c] * xr[c];
            ax += dyr[c] * g.data[c] * xr[c];
          }
          double inv = 1.0 / std::sqrt(ms / d + eps);
          for (int64_t c = 0; c < d; ++c) {
            dx.data[r * d + c] = inv * dyr[c] * g.data[c] - xr[c] * inv * inv * inv * ax / d;
            dg.data[c] += dyr[c] * xr[c] * inv;
          }
        }
        out(o.getDx(), dx);
        out(o.getDgamma(), dg);
        return true;
      })
      .Case([&](ClampOp o) {
        Tensor y = in(o.getX());
        double c = o.getLimit().convertToFloat();
        for (double &v : y.data)
          v = std::min(std::max(v, -c), c);
        out(o.getResult(), y);
        return true;
      })
      .Case([&](ClampGradOp o) {
        Tensor &x = in(o.getX());
        Tensor dx = in(o.getDy());
        double c = o.getLimit().convertToFloat();
        for (size_t i = 0; i < dx.data.size(); ++i)
          if (x.data[i] < -c || x.data[i] > c)
            dx.data[i] = 0;
        out(o.getDx(), dx);
        return true;
      })
      .Case([&](SigmoidGateOp o) {
        Tensor &x = in(o.getX()), &g = in(o.getGate());
        int64_t d = x.shape.back();
        Tensor y = Tensor::zeros(x.shape);
        for (size_t r = 0; r < g.data.size(); ++r) {
          double s = 1.0 / (1.0 + std::exp(-g.data[r]));
          for (int64_t c = 0; c < d; ++c)
            y.data[r * d + c] = x.data[r * d + c] * s;
        }
        out(o.getResult(), y);
        return true;
      })
      .Case([&](SigmoidGateGradOp o) {
        Tensor &x = in(o.getX()), &g = in(o.getGate()), &dy = in(o.getDy());
        int64_t d = x.shape.back();
        Tensor dx = Tensor::zeros(x.shape), dg = Tensor::zeros(g.shape);
        for (size_t r = 0; r < g.data.size(); ++r) {
          double s = 1.0 / (1.0 + std::exp(-g.data[r])), dot = 0;
          for (int64_t c = 0; c < d; ++c) {
            dx.data[r * d + c] = dy.data[r * d + c] * s;
            dot += dy.data[r * d + c] * x.data[r * d + c];
          }
          dg.data[r] = s * (1 - s) * dot;
        }
        out(o.getDx(), dx);
        out(o.getDgate(), dg);
        return true;
      })
      .Case([&](LinearOp o) {
        Tensor &x = in(o.getX()), &w = in(o.getWeight());
        int64_t k = w.shape[0], n = w.shape[1], m = rows(x);
        Tensor y = Tensor::zeros(shapeOf(o.getResult()));
        matmul(x.data.data(), w.data.data(), y.data.data(), m, k, n, false, false, false);
        if (o.getBias()) {
          Tensor &b = in(o.getBias());
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j)
              y.data[i * n + j] += b.data[j];
        }
        out(o.getResult(), y);
        return true;
      })
      .Case([&](LinearGradOp o) {
        Tensor &x = in(o.getX()), &w = in(o.getWeight()), &dy = in(o.getDy());
        int64_t k = w.shape[0], n = w.shape[1], m = rows(x);
        Tensor dx = Tensor::zeros(x.shape), dw = Tensor::zeros(w.shape);
        matmul(dy.data.data(), w.data.data(), dx.data.data(), m, n, k, false, true, false);
        matmul(x.data.data(), dy.data.data(), dw.data.data(), k, m, n, true, false, false);
        out(o.getDx(), dx);
        out(o.getDweight(), dw);
        return true;
      })
      .Case([&](BiasGradOp o) {
        Tensor &dy = in(o.getDy());
        int64_t n = dy.shape.back();
        Tensor db = Tensor::zeros({n});
        for (int64_t i = 0; i < rows(dy); ++i)
          for (int64_t j = 0; j < n; ++j)
            db.data[j] += dy.data[i * n + j];
        out(o.getDbias(), db);
        return true;
      })
      .Case([&](CastOp o) {
        // Exact: the reference computes in f64 whatever the element types
        // (a low-precision step is compared with it at a tolerance).
        out(o.getResult(), in(o.getInput()));
        return true;
      })
      .Case([&](AddOp o) {
        Tensor y = in(o.getLhs());
        Tensor &b = in(o.getRhs());
        for (size_t i = 0; i < y.data.size(); ++i)
          y.data[i] += b.data[i];
        out(o.getResult(), y);
        return true;
      })
      .Case([&](FFNOp o) {
        runFFN(o, false);
        return true;
      })
      .Case([&](FFNGradOp o) {
        runFFNGrad(o, false);
        return true;
      })
      .Case([&](ExpertFFNOp o) {
        runFFN(o, true);
        return true;
      })
      .Case([&](ExpertFFNGradOp o) {
        runFFNGrad(o, true);
        return true;
      })
      .Case([&](AttentionOp o) {
        Tensor &q = in(o.getQ()), &k = in(o.getK()), &v = in(o.getV());
        Tensor y = Tensor::zeros(q.shape);
        y.data = ropedAttend(q.data, k.data, v.data, dimsOf(o), thetaOf(o));
        out(o.getResult(), y);
        return true;
      })
      .Case([&](AttentionGradOp o) {
        Tensor &q = in(o.getQ()), &k = in(o.getK()), &v = in(o.getV()), &dout = in(o.getDout());
        Tensor dq = Tensor::zeros(q.shape), dk = Tensor::zeros(k.shape),
               dv = Tensor::zeros(v.shape);
        ropedAttendGrad(q.data, k.data, v.data, dout.data, dimsOf(o), thetaOf(o), dq.data, dk.data,
                        dv.data);
        out(o.getDq(), dq);
        out(o.getDk(), dk);
        out(o.getDv(), dv);
        return true;
      })
      .Case([&](LatentAttentionOp o) {
        Tensor &q = in(o.getQ()), &k = in(o.getK()), &kr = in(o.getKRope()), &v = in(o.getV());
        LatentDims a{q.shape[0],        q.shape[1],     static_cast<int64_t>(o.getNumHeads()),
                     o.getContentDim(), o.getRopeDim(), o.getValueDim()};
        Tensor y = Tensor::zeros(v.shape);
        y.data = latentAttend(q.data, k.data, kr.data, v.data, a, thetaOf(o));
        out(o.getResult(), y);
        return true;
      })
      .Case([&](LatentAttentionGradOp o) {
        Tensor &q = in(o.getQ()), &k = in(o.getK()), &kr = in(o.getKRope()), &v = in(o.getV()),
               &dout = in(o.getDout());
        auto heads = static_cast<int64_t>(o.getNumHeads());
        LatentDims a{q.shape[0],         q.shape[1],  heads,
                     k.shape[2] / heads, kr.shape[2], v.shape[2] / heads};
        Tensor dq = Tensor::zeros(q.shape), dk = Tensor::zeros(k.shape),
               dkr = Tensor::zeros(kr.shape), dv = Tensor::zeros(v.shape);
        latentAttendGrad(q.data, k.data, kr.data, v.data, dout.data, a, thetaOf(o), dq.data,
                         dk.data, dkr.data, dv.data);
        out(o.getDq(), dq);
        out(o.getDk(), dk);
        out(o.getDkRope(), dkr);
        out(o.getDv(), dv);
        return true;
      })
      .Case([&](RouterOp o) {
        routeTokens(o);
        return true;
      })
      .Case([&](RouterGradOp o) {
        Tensor &x = in(o.getX()), &w = in(o.getWeight()), &dgates = in(o.getDgates());
        double daux = in(o.getDaux()).data[0];
        Tensor *bias = o.getBias() ? &in(o.getBias()) : nullptr;
        int64_t d = w.shape[0], e = w.shape[1], k = o.getTopK(), t = rows(x);
        double scaling = o.getRoutedScaling().convertToFloat();
        double coef = o.getAuxLossCoef().convertToFloat();
        double zcoef = o.getZLossCoef().convertToFloat();
        std::vector<Routing> routes;
        std::vector<int64_t> starts = balanceStarts(
            o.getAuxPerSequence(), x, t, groupStarts(o.getGroups(), o.getGroupSizesAttr(), t));
        int64_t groups = static_cast<int64_t>(starts.size()) - 1;
        Vec frac(groups * e, 0.0);
        for (int64_t i = 0; i < t; ++i) {
          routes.push_back(route(&x.data[i * d], w, bias, d, e, k, o.getScoring(),
                                 o.getRenormalize(), scaling,
                                 {static_cast<int64_t>(o.getExpertGroups()),
                                  static_cast<int64_t>(o.getTopkGroups())}));
          int64_t g = groupOf(starts, i), tg = starts[g + 1] - starts[g];
          for (int64_t j : routes.back().sel)
            frac[g * e + j] += 1.0 / (tg * k);
        }
        Tensor dx = Tensor::zeros(x.shape), dw = Tensor::zeros(w.shape);
        Vec dlogits(t * e, 0.0);
        for (int64_t i = 0; i < t; ++i) {
          const Routing &r = routes[i];
          Vec ds(e, 0.0);
          // Through the selected gates.
          double sumTerm = 0;
          for (int64_t j = 0; j < k; ++j)
            sumTerm += dgates.data[i * k + j] * r.scores[r.sel[j]];
          for (int64_t j = 0; j < k; ++j) {
            double g = dgates.data[i * k + j];
            ds[r.sel[j]] +=
                o.getRenormalize()
                    ? scaling * (g / r.selectedSum - sumTerm / (r.selectedSum * r.selectedSum))
                    : scaling * g;
          }
          // Through the balancing loss (f_e constant).
          Vec gp(e);
          for (int64_t c = 0; c < e; ++c)
            gp[c] = daux * coef * e * frac[groupOf(starts, i) * e + c] / t;
          if (o.getScoring() == Scoring::softmax) {
            for (int64_t c = 0; c < e; ++c)
              ds[c] += gp[c];
          } else {
            double sum = std::accumulate(r.scores.begin(), r.scores.end(), 0.0);
            double dot = 0;
            for (int64_t c = 0; c < e; ++c)
              dot += gp[c] * r.scores[c] / sum;
            for (int64_t c = 0; c < e; ++c)
              ds[c] += (gp[c] - dot) / sum;
          }
          // Scores to logits.
          double *dl = &dlogits[i * e];
          if (o.getScoring() == Scoring::softmax) {
            double dot = 0;
            for (int64_t c = 0; c < e; ++c)
              dot += ds[c] * r.scores[c];
            for (int64_t c = 0; c < e; ++c)
              dl[c] = r.scores[c] * (ds[c] - dot);
          } else {
            for (int64_t c = 0; c < e; ++c)
              dl[c] = ds[c] * r.scores[c] * (1.0 - r.scores[c]);
          }
          // The z-loss.
          double lse = logSumExp(r.logits);
          for (int64_t c = 0; c < e; ++c)
            dl[c] += daux * zcoef * 2.0 * lse / t * std::exp(r.logits[c] - lse);
        }
        matmul(dlogits.data(), w.data.data(), dx.data.data(), t, e, d, false, true, false);
        matmul(x.data.data(), dlogits.data(), dw.data.data(), d, t, e, true, false, false);
        out(o.getDx(), dx);
        out(o.getDweight(), dw);
        return true;
      })
      .Case([&](DispatchOp o) {
        Tensor &x = in(o.getX()), &experts = in(o.getExperts());
        std::vector<int64_t> shape = shapeOf(o.getResult());
        int64_t d = shape[2], k = experts.shape.back();
        std::vector<int64_t> slots = assignSlots(experts, shape[0], shape[1], error);
        if (!error.empty())
          return fail(op, error);
        Tensor buf = Tensor::zeros(shape);
        for (size_t i = 0; i < slots.size(); ++i)
          if (slots[i] >= 0)
            std::copy_n(&x.data[(i / k) * d], d,
                        &buf.data[(experts.ints[i] * shape[1] + slots[i]) * d]);
        out(o.getResult(), buf);
        return true;
      })
      .Case([&](DispatchGradOp o) {
        Tensor &dbuf = in(o.getDbuf()), &experts = in(o.getExperts());
        int64_t c = dbuf.shape[1], d = dbuf.shape[2], k = experts.shape.back();
        std::vector<int64_t> slots = assignSlots(experts, dbuf.shape[0], c, error);
        if (!error.empty())
          return fail(op, error);
        Tensor dx = Tensor::zeros(shapeOf(o.getDx()));
        for (size_t i = 0; i < slots.size(); ++i)
          if (slots[i] >= 0)
            for (int64_t j = 0; j < d; ++j)
              dx.data[(i / k) * d + j] += dbuf.data[(experts.ints[i] * c + slots[i]) * d + j];
        out(o.getDx(), dx);
        return true;
      })
      .Case([&](CombineOp o) {
        Tensor &y = in(o.getY()), &gates = in(o.getGates()), &experts = in(o.getExperts());
        int64_t c = y.shape[1], d = y.shape[2], k = experts.shape.back();
        std::vector<int64_t> slots = assignSlots(experts, y.shape[0], c, error);
        if (!error.empty())
          return fail(op, error);
        Tensor res = Tensor::zeros(shapeOf(o.getResult()));
        for (size_t i = 0; i < slots.size(); ++i)
          if (slots[i] >= 0)
            for (int64_t j = 0; j < d; ++j)
              res.data[(i / k) * d + j] +=
                  gates.data[i] * y.data[(experts.ints[i] * c + slots[i]) * d + j];
        out(o.getResult(), res);
        return true;
      })
      .Case([&](CombineGradOp o) {
        Tensor &y = in(o.getY()), &gates = in(o.getGates()), &experts = in(o.getExperts()),
               &dout = in(o.getDout());
        int64_t c = y.shape[1], d = y.shape[2], k = experts.shape.back();
        std::vector<int64_t> slots = assignSlots(experts, y.shape[0], c, error);
        if (!error.empty())
          return fail(op, error);
        Tensor dy = Tensor::zeros(y.shape), dg = Tensor::zeros(gates.shape);
        for (size_t i = 0; i < slots.size(); ++i) {
          if (slots[i] < 0)
            continue;
          for (int64_t j = 0; j < d; ++j) {
            int64_t at = (experts.ints[i] * c + slots[i]) * d + j;
            dy.data[at] += gates.data[i] * dout.data[(i / k) * d + j];
            dg.data[i] += y.data[at] * dout.data[(i / k) * d + j];
          }
        }
        out(o.getDy(), dy);
        out(o.getDgates(), dg);
        return true;
      })
      .Case([&](CrossEntropyOp o) {
        Tensor &logits = in(o.getLogits()), &targets = in(o.getTargets());
        int64_t v = logits.shape.back(), t = rows(logits);
        double loss = 0;
        for (int64_t i = 0; i < t; ++i) {
          int32_t target = targets.ints[i];
          if (target < 0 || target >= v)
            return fail(op, "target " + std::to_string(target) + " out of range");
          Vec row(&logits.data[i * v], &logits.data[(i + 1) * v]);
          loss += (logSumExp(row) - row[target]) / t;
        }
        Tensor res = Tensor::zeros({});
        res.data[0] = loss * o.getScale().convertToDouble();
        out(o.getResult(), res);
        return true;
      })
      .Case([&](CrossEntropyGradOp o) {
        Tensor &logits = in(o.getLogits()), &targets = in(o.getTargets());
        double dloss = in(o.getDloss()).data[0] * o.getScale().convertToDouble();
        int64_t v = logits.shape.back(), t = rows(logits);
        Tensor dl = Tensor::zeros(logits.shape);
        for (int64_t i = 0; i < t; ++i) {
          Vec row(&logits.data[i * v], &logits.data[(i + 1) * v]);
          double lse = logSumExp(row);
          for (int64_t j = 0; j < v; ++j)
            dl.data[i * v + j] =
                (std::exp(row[j] - lse) - (j == targets.ints[i] ? 1.0 : 0.0)) * dloss / t;
        }
        out(o.getDlogits(), dl);
        return true;
      })
      .Case([&](FusedGateOp o) {
        routeTokens(o);
        Tensor &experts = in(o.getExperts());
        int64_t e = in(o.getWeight()).shape[1], k = o.getTopK(), t = rows(in(o.getX()));
        // Each group assigns its own `cap` slots per expert; group g's
        // slots of expert e start at e * (G * cap) + g * cap.
        int64_t cap = o.getCapacity(), groups = o.getGroups();
        std::vector<int64_t> starts = groupStarts(groups, o.getGroupSizesAttr(), t);
        Tensor slots = Tensor::ids(shapeOf(o.getSlots()), std::vector<int32_t>(t * k));
        Tensor counts = Tensor::ids({e}, std::vector<int32_t>(e, 0));
        for (int64_t g = 0; g < groups; ++g) {
          int64_t first = starts[g] * k, per = (starts[g + 1] - starts[g]) * k;
          Tensor part =
              Tensor::ids({per}, std::vector<int32_t>(experts.ints.begin() + first,
                                                      experts.ints.begin() + first + per));
          std::vector<int64_t> assigned = assignSlots(part, e, cap, error);
          if (assigned.empty() && per > 0)
            return fail(op, error);
          for (int64_t i = 0; i < per; ++i) {
            int32_t ex = part.ints[i];
            counts.ints[ex] += 1;
            slots.ints[first + i] =
                assigned[i] < 0 ? -1
                                : static_cast<int32_t>(ex * groups * cap + g * cap + assigned[i]);
          }
        }
        out(o.getSlots(), slots);
        out(o.getCounts(), counts);
        return true;
      })
      .Case([&](PermuteOp o) {
        Tensor &x = in(o.getX()), &slots = in(o.getSlots());
        std::vector<int64_t> shape = shapeOf(o.getResult());
        int64_t d = shape[2], k = slots.shape.back(), total = shape[0] * shape[1];
        Tensor buf = Tensor::zeros(shape);
        for (size_t i = 0; i < slots.ints.size(); ++i) {
          int32_t s = slots.ints[i];
          if (s >= total)
            return fail(op, "slot " + std::to_string(s) + " out of range");
          if (s >= 0)
            std::copy_n(&x.data[(i / k) * d], d, &buf.data[s * d]);
        }
        out(o.getResult(), buf);
        return true;
      })
      .Case([&](UnpermuteOp o) {
        Tensor &buf = in(o.getBuf()), &slots = in(o.getSlots());
        Tensor *weights = o.getWeights() ? &in(o.getWeights()) : nullptr;
        int64_t d = buf.shape[2], k = slots.shape.back(), total = buf.shape[0] * buf.shape[1];
        Tensor res = Tensor::zeros(shapeOf(o.getResult()));
        for (size_t i = 0; i < slots.ints.size(); ++i) {
          int32_t s = slots.ints[i];
          if (s >= total)
            return fail(op, "slot " + std::to_string(s) + " out of range");
          if (s < 0)
            continue;
          double wgt = weights ? weights->data[i] : 1.0;
          for (int64_t j = 0; j < d; ++j)
            res.data[(i / k) * d + j] += wgt * buf.data[s * d + j];
        }
        out(o.getResult(), res);
        return true;
      })
      .Case([&](UnpermuteGradOp o) {
        Tensor &buf = in(o.getBuf()), &slots = in(o.getSlots()), &weights = in(o.getWeights()),
               &dout = in(o.getDout());
        int64_t d = buf.shape[2], k = slots.shape.back();
        Tensor dbuf = Tensor::zeros(buf.shape), dw = Tensor::zeros(weights.shape);
        for (size_t i = 0; i < slots.ints.size(); ++i) {
          int32_t s = slots.ints[i];
          if (s < 0)
            continue;
          for (int64_t j = 0; j < d; ++j) {
            dbuf.data[s * d + j] += weights.data[i] * dout.data[(i / k) * d + j];
            dw.data[i] += buf.data[s * d + j] * dout.data[(i / k) * d + j];
          }
        }
        out(o.getDbuf(), dbuf);
        out(o.getDweights(), dw);
        return true;
      })
      .Case([&](LRScheduleOp o) {
        double t = in(o.getStep()).ints[0] + 1.0;
        double lr = o.getLr().convertToDouble();
        double minLr = o.getMinLr().convertToDouble();
        double warmup = static_cast<double>(o.getWarmupSteps());
        double total = static_cast<double>(o.getTotalSteps());
        double rate;
        if (t <= warmup) {
          rate = lr * t / warmup;
        } else {
          double p = std::min(1.0, (t - warmup) / std::max(1.0, total - warmup));
          StringRef s = o.getSchedule();
          rate = s == "cosine"   ? minLr + (lr - minLr) * (1 + std::cos(M_PI * p)) / 2
                 : s == "linear" ? lr - (lr - minLr) * p
                                 : lr;
        }
        Tensor r = Tensor::zeros({});
        r.data[0] = rate;
        out(o.getResult(), r);
        return true;
      })
      .Case([&](GlobalNormOp o) {
        double sum = 0;
        for (Value g : o.getGrads())
          for (double v : in(g).data)
            sum += v * v;
        Tensor r = Tensor::zeros({});
        r.data[0] = std::sqrt(sum);
        lastGlobalNorm = r.data[0];
        out(o.getResult(), r);
        return true;
      })
      .Case([&](SumSquaresOp o) {
        const Tensor &x = in(o.getInput());
        auto shape = cast<RankedTensorType>(o.getType()).getShape();
        int64_t rows = shape[0], chunks = shape[1];
        int64_t row = static_cast<int64_t>(x.data.size()) / rows;
        Tensor r = Tensor::zeros({rows, chunks});
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t e = 0; e < row; ++e) {
            double v = x.data[i * row + e];
            r.data[i * chunks + e % chunks] += v * v;
          }
        out(o.getResult(), r);
        return true;
      })
      .Case([&](AdamWUpdateOp o) {
        std::string name = o.getParam().str();
        auto it = params.find(name);
        if (it == params.end())
          return fail(op, "no value for parameter " + name);
        Tensor &w = it->second;
        const Tensor &g = in(o.getGrad());
        auto &[m, v] = moments[name];
        m.resize(w.data.size(), 0.0);
        v.resize(w.data.size(), 0.0);
        double t = in(o.getStep()).ints[0] + 1.0;
        double lr = in(o.getLr()).data[0], norm = in(o.getNorm()).data[0];
        double b1 = o.getBeta1().convertToDouble();
        double b2 = o.getBeta2().convertToDouble();
        double eps = o.getEps().convertToDouble();
        double wd = o.getWeightDecay().convertToDouble();
        double clip = o.getGradClip().convertToDouble();
        double c = clip > 0 ? std::min(1.0, clip / (norm + 1e-6)) : 1.0;
        for (size_t i = 0; i < w.data.size(); ++i) {
          double gi = c * g.data[i];
          m[i] = b1 * m[i] + (1 - b1) * gi;
          v[i] = b2 * v[i] + (1 - b2) * gi * gi;
          double mh = m[i] / (1 - std::pow(b1, t));
          double vh = v[i] / (1 - std::pow(b2, t));
          w.data[i] -= lr * (mh / (std::sqrt(vh) + eps) + wd * w.data[i]);
        }
        return true;
      })
      .Case([&](BalanceBiasOp o) {
        // One process holds the whole batch: sum_axes has nothing to add.
        std::string name = o.getParam().str();
        auto it = params.find(name);
        if (it == params.end())
          return fail(op, "no value for parameter " + name);
        Tensor &bias = it->second;
        int64_t experts = static_cast<int64_t>(bias.data.size()), total = 0;
        std::vector<int64_t> load(bias.data.size(), 0);
        for (int32_t e : in(o.getExperts()).ints) {
          if (e < 0 || e >= experts)
            return fail(op, "expert index " + std::to_string(e) + " out of range");
          ++load[e];
          ++total;
        }
        double rate = o.getRate().convertToDouble();
        for (int64_t e = 0; e < experts; ++e) {
          int64_t gap = total - experts * load[e];
          if (gap != 0)
            bias.data[e] += gap > 0 ? rate : -rate;
        }
        return true;
      })
      .Default([&](Operation *) { return fail(op, "not supported"); });
}
} // namespace

void ::moec::reference::Interpreter::initParams(uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (ParamOp p : module.getOps<ParamOp>()) {
    Tensor t = Tensor::zeros(std::vector<int64_t>(p.getTensorType().getShape().begin(),
                                                  p.getTensorType().getShape().end()));
    InitAttr init = p.getInit();
    double scale = init.getScaleValue();
    std::normal_distribution<double> normal(0.0, scale > 0 ? scale : 1.0);
    std::uniform_real_distribution<double> uniform(-scale, scale);
    for (double &v : t.data) {
      switch (init.getKind()) {
      case InitKind::zeros:
        v = 0;
        break;
      case InitKind::ones:
        v = 1;
        break;
      case InitKind::normal:
        v = normal(rng);
        break;
      case InitKind::uniform:
        v = uniform(rng);
        break;
      }
    }
    params[p.getSymName().str()] = t;
  }
}

bool ::moec::reference::Interpreter::run(const std::string &name, const std::vector<Tensor> &args,
                                         std::vector<Tensor> &results, std::string &error) {
  auto fn = module.lookupSymbol<func::FuncOp>(name);
  if (!fn) {
    error = "no function @" + name;
    return false;
  }
  error.clear();
  lastRouterLosses.clear();
  return Runner(params, moments, lastGlobalNorm, lastRouterLosses, error).run(fn, args, results);
}
