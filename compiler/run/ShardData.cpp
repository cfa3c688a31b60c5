//===- ShardData.cpp - dtc run --data DIR: safetensors shards -------------===//

#include "compiler/run/ShardData.h"

#include "runtime/checkpoint/Safetensors.h"
#include "runtime/core/Kernel.h"
#include "runtime/support/Error.h"

#include "runtime/proto/program.pb.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace dtc {
namespace rt = runtime;

uint64_t splitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

namespace {

/// Uniform in [0, 1) from a hash.
double unitOf(uint64_t h) {
  return static_cast<double>(splitMix64(h) >> 11) * 0x1.0p-53;
}

/// A 4-round Feistel network over [0, 2^(2 * half)): a bijection for any
/// round keys.
uint64_t feistel(uint64_t x, unsigned half, const uint64_t keys[4]) {
  const uint64_t mask = (uint64_t(1) << half) - 1;
  uint64_t left = x >> half, right = x & mask;
  for (int round = 0; round < 4; ++round) {
    uint64_t next = left ^ (splitMix64(keys[round] ^ right) & mask);
    left = right;
    right = next;
  }
  return (left << half) | right;
}

bool isIntDType(rt::DType t) {
  return t == rt::DType::I64 || t == rt::DType::I32 || t == rt::DType::I8 ||
         t == rt::DType::BOOL;
}

/// Whether a shard's `from` converts to an argument's `to` without losing
/// anything a model reads: ids between int widths (values are checked),
/// masks from int8/bool, floats to wider floats.
bool convertsLosslessly(rt::DType from, rt::DType to) {
  if (from == to)
    return true;
  if (to == rt::DType::I64 || to == rt::DType::I32)
    return isIntDType(from);
  if (to == rt::DType::F32)
    return from == rt::DType::F16 || from == rt::DType::BF16;
  if (to == rt::DType::F64)
    return from == rt::DType::F16 || from == rt::DType::BF16 ||
           from == rt::DType::F32;
  return false;
}

llvm::StringRef dtypeText(rt::DType t) {
  llvm::StringRef s = rt::safetensorsDType(t);
  return s.empty() ? rt::dtypeName(t) : s;
}

/// The message of an error without dtc's "file: " decorations.
std::string messageOf(llvm::Error e) { return llvm::toString(std::move(e)); }

} // namespace

int64_t shardRowOf(uint64_t seed, int64_t rows, uint64_t sample) {
  const uint64_t n = static_cast<uint64_t>(rows);
  const uint64_t epoch = sample / n, position = sample % n;
  // An even number of bits, at least 2, covering [0, n).
  unsigned bits = std::max(2u, llvm::Log2_64_Ceil(n));
  bits += bits & 1;
  uint64_t key = splitMix64(splitMix64(seed ^ 0x73686172645f6f72ull) ^ epoch);
  uint64_t keys[4];
  for (int i = 0; i < 4; ++i)
    keys[i] = splitMix64(key + static_cast<uint64_t>(i));
  // Cycle walking: the bijection of [0, 2^bits) restricted to [0, n) by
  // re-applying it until it lands inside, itself a bijection of [0, n);
  // fewer than 4 steps on average, as 2^bits < 4n.
  uint64_t x = position;
  do
    x = feistel(x, bits / 2, keys);
  while (x >= n);
  return static_cast<int64_t>(x);
}

llvm::Expected<MaskedLm> MaskedLm::of(const program::Training &training,
                                      uint64_t seed) {
  if (!training.has_mask_token_id())
    return badInput("masked-lm: the data has no labels, so dtc masks the "
                    "tokens itself, and the bundle has no [MASK] id: "
                    "recompile with --mask-token-id ID, or give the data a "
                    "'labels' tensor (original ids at masked positions, "
                    "-100 elsewhere)");
  MaskedLm m;
  m.seed = seed;
  m.maskTokenId = training.mask_token_id();
  m.probability =
      training.mask_probability() > 0 ? training.mask_probability() : 0.15;
  m.vocab = std::max<int64_t>(1, training.vocab());
  return m;
}

MaskedLm::Token MaskedLm::at(uint64_t sample, int64_t position,
                             int64_t id) const {
  uint64_t h =
      splitMix64(splitMix64(splitMix64(seed ^ 0x6d61736b65646c6dull) ^ sample) ^
                 static_cast<uint64_t>(position));
  if (unitOf(h) >= probability)
    return {id, -100};
  double action = unitOf(h ^ 0x1);
  if (action < 0.8)
    return {maskTokenId, id};
  if (action < 0.9)
    return {static_cast<int64_t>(splitMix64(h ^ 0x2) %
                                 static_cast<uint64_t>(vocab)),
            id};
  return {id, id};
}

int64_t loadInt(const rt::TensorRef &t, int64_t i) {
  switch (t.dtype) {
  case rt::DType::I32:
    return t.as<int32_t>()[i];
  case rt::DType::I8:
    return t.as<int8_t>()[i];
  case rt::DType::BOOL:
    return t.as<uint8_t>()[i];
  default:
    return t.as<int64_t>()[i];
  }
}

void storeInt(const rt::TensorRef &t, int64_t i, int64_t v) {
  switch (t.dtype) {
  case rt::DType::I32:
    t.as<int32_t>()[i] = static_cast<int32_t>(v);
    break;
  case rt::DType::I8:
    t.as<int8_t>()[i] = static_cast<int8_t>(v);
    break;
  case rt::DType::BOOL:
    t.as<uint8_t>()[i] = v != 0;
    break;
  default:
    t.as<int64_t>()[i] = v;
  }
}

void storeFloat(const rt::TensorRef &t, int64_t i, float v) {
  switch (t.dtype) {
  case rt::DType::F64:
    t.as<double>()[i] = v;
    break;
  case rt::DType::BF16:
    t.as<uint16_t>()[i] = rt::floatToBF16(v);
    break;
  case rt::DType::F16:
    t.as<uint16_t>()[i] = rt::floatToHalf(v);
    break;
  default:
    t.as<float>()[i] = v;
  }
}

// --- ShardSet ---------------------------------------------------------------

llvm::Expected<std::shared_ptr<ShardSet>> ShardSet::open(llvm::StringRef dir) {
  llvm::SmallString<256> realDir;
  if (std::error_code ec = llvm::sys::fs::real_path(dir, realDir))
    return badInput("--data {0}: {1}", dir, ec.message());
  std::vector<std::string> names;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(realDir, ec), end; !ec && it != end;
       it.increment(ec)) {
    llvm::StringRef name = llvm::sys::path::filename(it->path());
    if (name.ends_with(".safetensors"))
      names.push_back(name.str());
  }
  if (ec)
    return badInput("--data {0}: cannot list it: {1}", dir, ec.message());
  if (names.empty())
    return badInput("--data {0}: no *.safetensors shards in the directory; "
                    "write the samples as safetensors shards (tensors named "
                    "by graph input or role, dim 0 the sample) or pass a "
                    "token file",
                    dir);
  llvm::sort(names);

  auto set = std::make_shared<ShardSet>();
  set->dir_ = dir.str();
  for (const std::string &name : names) {
    llvm::SmallString<256> path(realDir), real;
    llvm::sys::path::append(path, name);
    // A link may point anywhere: only shards inside the directory are
    // data of this set.
    if (std::error_code e = llvm::sys::fs::real_path(path, real))
      return badInput("--data {0}: {1}: {2}", dir, name, e.message());
    if (!llvm::StringRef(real).starts_with((realDir + "/").str()))
      return badInput("--data {0}: {1} is a link to {2}, outside the "
                      "directory; copy the shard into it",
                      dir, name, real);
    llvm::sys::fs::file_status status;
    if (std::error_code e = llvm::sys::fs::status(real, status))
      return badInput("--data {0}: {1}: {2}", dir, name, e.message());
    if (status.type() != llvm::sys::fs::file_type::regular_file)
      return badInput("--data {0}: {1} is not a regular file; only "
                      "safetensors files may end in .safetensors there",
                      dir, name);
    // The header is read and checked against the file size first; the
    // data is mapped, never read whole.
    auto file = rt::SafetensorsFile::open(real);
    if (!file)
      return badInput("--data {0}: {1}", dir, messageOf(file.takeError()));
    if (file->entries().empty())
      return badInput("--data {0}: {1} holds no tensors; remove it", dir, name);
    Shard shard;
    shard.file = name;
    shard.firstRow = set->rows_;
    const rt::SafetensorsEntry &first = file->entries().front();
    for (const rt::SafetensorsEntry &e : file->entries()) {
      if (e.shape.empty())
        return badInput("--data {0}: {1}: tensor '{2}' is a scalar; dim 0 "
                        "of every tensor is the sample",
                        dir, name, e.name);
      if (e.shape[0] != first.shape[0])
        return badInput("--data {0}: {1}: tensor '{2}' has {3} rows, '{4}' "
                        "{5}; every tensor of a shard holds the same samples",
                        dir, name, e.name, e.shape[0], first.name,
                        first.shape[0]);
    }
    shard.rows = first.shape[0];
    auto buffer = llvm::MemoryBuffer::getFile(real, /*IsText=*/false,
                                              /*RequiresNullTerminator=*/false);
    if (!buffer)
      return badInput("--data {0}: {1}: {2}", dir, name,
                      buffer.getError().message());
    // Changed since its header was checked: its sizes are not to be
    // trusted.
    uint64_t end = 0;
    for (const rt::SafetensorsEntry &e : file->entries())
      end = std::max(end, e.end);
    if ((*buffer)->getBufferSize() != end)
      return badInput("--data {0}: {1} changed while it was read; rerun once "
                      "it is written",
                      dir, name);
    shard.buffer = std::move(*buffer);

    // The first shard fixes the tensors; every other must hold the same.
    if (set->shards_.empty()) {
      for (const rt::SafetensorsEntry &e : file->entries()) {
        ShardTensor t;
        t.name = e.name;
        t.dtype = e.dtype;
        t.rowShape.assign(e.shape.begin() + 1, e.shape.end());
        t.rowBytes = static_cast<int64_t>(rt::numElements(t.rowShape) *
                                          rt::dtypeSize(t.dtype));
        set->tensors_.push_back(std::move(t));
      }
      llvm::sort(set->tensors_,
                 [](const auto &a, const auto &b) { return a.name < b.name; });
    }
    if (file->entries().size() != set->tensors_.size() ||
        llvm::any_of(set->tensors_,
                     [&](const ShardTensor &t) { return !file->find(t.name); }))
      return badInput("--data {0}: {1} holds other tensors than {2} ({3}); "
                      "every shard holds the same tensors",
                      dir, name, set->shards_.front().file, set->tensorList());
    for (const ShardTensor &t : set->tensors_) {
      const rt::SafetensorsEntry *e = file->find(t.name);
      llvm::ArrayRef<int64_t> row = llvm::ArrayRef(e->shape).drop_front();
      if (e->dtype != t.dtype || row != llvm::ArrayRef(t.rowShape))
        return badInput("--data {0}: {1}: tensor '{2}' is {3} {4} per "
                        "sample, in {5} {6} {7}; every shard holds the same "
                        "tensors",
                        dir, name, t.name, dtypeText(e->dtype),
                        rt::shapeString(row), set->shards_.front().file,
                        dtypeText(t.dtype), rt::shapeString(t.rowShape));
      shard.offsets.push_back(e->begin);
    }
    set->rows_ += shard.rows;
    set->shards_.push_back(std::move(shard));
  }
  if (set->rows_ == 0)
    return badInput("--data {0}: the shards hold no samples", dir);
  return set;
}

int ShardSet::find(llvm::StringRef name) const {
  for (auto [i, t] : llvm::enumerate(tensors_))
    if (t.name == name)
      return static_cast<int>(i);
  return -1;
}

std::string ShardSet::tensorList() const {
  std::string text;
  for (const ShardTensor &t : tensors_)
    text += (text.empty() ? "'" : ", '") + t.name + "'";
  return text;
}

const ShardSet::Shard &ShardSet::shardOf(int64_t row) const {
  return *std::partition_point(
      shards_.begin(), shards_.end() - 1,
      [&](const Shard &s) { return s.firstRow + s.rows <= row; });
}

const char *ShardSet::rowData(int tensor, int64_t row) const {
  const Shard &shard = shardOf(row);
  return shard.buffer->getBufferStart() + shard.offsets[tensor] +
         (row - shard.firstRow) * tensors_[tensor].rowBytes;
}

llvm::StringRef ShardSet::fileOf(int64_t row) const {
  return shardOf(row).file;
}

llvm::json::Array ShardSet::identity() const {
  llvm::json::Array shards;
  for (const Shard &s : shards_)
    shards.push_back(llvm::json::Object{{"file", s.file}, {"rows", s.rows}});
  return shards;
}

std::string describeShards(const llvm::json::Array &identity) {
  int64_t rows = 0;
  std::string list;
  for (auto [i, v] : llvm::enumerate(identity)) {
    const llvm::json::Object *shard = v.getAsObject();
    if (!shard)
      continue;
    int64_t n = shard->getInteger("rows").value_or(0);
    rows += n;
    if (i < 3)
      list += llvm::formatv("{0}{1} {2}", i ? ", " : "",
                            shard->getString("file").value_or("?"), n);
    else if (i == 3)
      list += ", ...";
  }
  return llvm::formatv("{0} shard{1}, {2} rows ({3})", identity.size(),
                       identity.size() == 1 ? "" : "s", rows, list);
}

// --- ShardFeeder ------------------------------------------------------------

std::string DataArgument::text() const {
  if (name.empty() || name == feed)
    return "the " + feed + " argument";
  return "argument '" + name + "' (" + feed + ")";
}

llvm::Expected<ShardFeeder>
ShardFeeder::bind(std::shared_ptr<const ShardSet> shards,
                  llvm::ArrayRef<DataArgument> arguments,
                  const program::Training &training) {
  const ShardSet &set = *shards;
  auto tensorOf = [&](const DataArgument &a) {
    int t = a.name.empty() ? -1 : set.find(a.name);
    return t >= 0 ? t : set.find(a.feed);
  };
  // The tensor the first argument of role `feed` reads, or -1.
  auto tensorOfRole = [&](llvm::StringRef feed) {
    for (const DataArgument &a : arguments)
      if (a.feed == feed && tensorOf(a) >= 0)
        return tensorOf(a);
    return set.find(feed);
  };
  auto mismatch = [&](int t, const DataArgument &a) -> llvm::Error {
    const ShardTensor &tensor = set.tensors()[t];
    if (llvm::ArrayRef(tensor.rowShape) != llvm::ArrayRef(a.rowShape))
      return badInput("--data {0}: {1}: tensor '{2}' holds samples of shape "
                      "{3}, {4} expects {5}; write it with that shape per "
                      "sample (dim 0 the sample)",
                      set.dir(), set.firstFile(), tensor.name,
                      rt::shapeString(tensor.rowShape), a.text(),
                      rt::shapeString(a.rowShape));
    if (!convertsLosslessly(tensor.dtype, a.dtype))
      return badInput("--data {0}: {1}: tensor '{2}' is {3}, {4} takes {5}; "
                      "store it as {5} (only I32<->I64, I8/BOOL->I64 and "
                      "F16/BF16->F32 convert)",
                      set.dir(), set.firstFile(), tensor.name,
                      dtypeText(tensor.dtype), a.text(), dtypeText(a.dtype));
    return llvm::Error::success();
  };

  ShardFeeder feeder;
  feeder.shards_ = shards;
  feeder.vocab_ = training.vocab();
  feeder.classify_ = training.objective() == "classify";
  feeder.decoderStart_ = training.decoder_start_token_id();
  // masked-lm without labels in the shards: dtc masks the tokens.
  const int labels = tensorOfRole("labels");
  if (training.objective() == "masked-lm" && labels < 0) {
    auto masking = MaskedLm::of(training, 0);
    if (!masking)
      return masking.takeError();
    feeder.masking_ = *masking;
  }
  for (const DataArgument &a : arguments) {
    Binding b;
    b.argument = a;
    b.tensor = tensorOf(a);
    if (b.tensor >= 0) {
      if (llvm::Error e = mismatch(b.tensor, a))
        return std::move(e);
      b.masked = feeder.masking_.has_value() && a.feed == "tokens";
    } else if (a.feed == "attention_mask") {
      b.source = Source::Ones;
    } else if (a.feed == "decoder_tokens" && labels >= 0) {
      if (!training.has_decoder_start_token_id())
        return badInput("--data {0}: no '{1}' tensor, and the bundle has no "
                        "decoder start id to shift the labels with: "
                        "recompile with --decoder-start-token-id ID or "
                        "write the decoder's input",
                        set.dir(), a.name.empty() ? a.feed : a.name);
      b.source = Source::DecoderFromLabels;
      b.tensor = labels;
      if (a.rowShape.size() != 1)
        return badInput("--data {0}: {1} is {2} per sample; dtc shifts "
                        "labels into decoder tokens of one sequence only: "
                        "write a '{3}' tensor",
                        set.dir(), a.text(), rt::shapeString(a.rowShape),
                        a.name.empty() ? a.feed : a.name);
    } else if (a.feed == "labels" && feeder.masking_ &&
               tensorOfRole("tokens") >= 0) {
      b.source = Source::MaskedLabels;
      b.tensor = tensorOfRole("tokens");
    } else {
      return badInput("--data {0}: no tensor for {1}; the shards hold {2}: "
                      "name one '{3}'{4}",
                      set.dir(), a.text(), set.tensorList(),
                      a.name.empty() ? a.feed : a.name,
                      a.name.empty() || a.name == a.feed
                          ? std::string()
                          : " or '" + a.feed + "'");
    }
    if (b.source != Source::Tensor && b.source != Source::Ones)
      if (llvm::Error e = mismatch(b.tensor, a))
        return std::move(e);
    feeder.bindings_.push_back(std::move(b));
  }
  return feeder;
}

int ShardFeeder::indexOf(llvm::StringRef name, llvm::StringRef feed) const {
  for (auto [i, b] : llvm::enumerate(bindings_))
    if (b.argument.name == name && b.argument.feed == feed)
      return static_cast<int>(i);
  return -1;
}

llvm::Error ShardFeeder::checkId(const Binding &b, int64_t row, int64_t element,
                                 int64_t id) const {
  llvm::StringRef feed = b.argument.feed;
  bool ids = feed == "labels" ||
             (!classify_ && (feed == "tokens" || feed == "decoder_tokens"));
  bool ok = true;
  if (ids && vocab_ > 0)
    ok = (id >= 0 && id < vocab_) || (feed != "tokens" && id == -100);
  if (b.argument.dtype == rt::DType::I32)
    ok = ok && id >= std::numeric_limits<int32_t>::min() &&
         id <= std::numeric_limits<int32_t>::max();
  if (ok)
    return llvm::Error::success();
  const ShardSet &set = *shards_;
  return badInput("--data {0}: {1}: tensor '{2}' holds {3} at element {4} of "
                  "sample row {5}, outside {6}; fix the data",
                  set.dir(), set.fileOf(row), set.tensors()[b.tensor].name, id,
                  element, row,
                  ids && vocab_ > 0
                      ? llvm::formatv("the model's vocabulary [0, {0}){1}",
                                      vocab_,
                                      feed == "tokens" ? "" : " (or -100)")
                            .str()
                      : "the range of " + dtypeText(b.argument.dtype).str());
}

llvm::Error ShardFeeder::fill(int argument, uint64_t seed, uint64_t sample,
                              const rt::TensorRef &out) const {
  const Binding &b = bindings_[argument];
  const int64_t n = rt::numElements(b.argument.rowShape);
  const bool floats = rt::isFloat(b.argument.dtype);
  if (b.source == Source::Ones) {
    for (int64_t e = 0; e < n; ++e)
      floats ? storeFloat(out, e, 1.0f) : storeInt(out, e, 1);
    return llvm::Error::success();
  }
  const ShardSet &set = *shards_;
  const ShardTensor &tensor = set.tensors()[b.tensor];
  const int64_t row = shardRowOf(seed, set.rows(), sample);
  rt::TensorRef in;
  in.data = const_cast<char *>(set.rowData(b.tensor, row));
  in.dtype = tensor.dtype;
  in.shape = {n};
  if (floats) {
    if (in.dtype == out.dtype)
      std::memcpy(out.data, in.data, tensor.rowBytes);
    else
      for (int64_t e = 0; e < n; ++e)
        storeFloat(out, e, rt::loadAsFloat(in, e));
    return llvm::Error::success();
  }
  std::optional<MaskedLm> masking = masking_;
  if (masking)
    masking->seed = seed;
  for (int64_t e = 0; e < n; ++e) {
    // The decoder's input at e is the label at e - 1 (HF's
    // shift_tokens_right; the pad id, which program.pb does not carry, is
    // taken as 0).
    if (b.source == Source::DecoderFromLabels && e == 0) {
      storeInt(out, 0, decoderIdOf(decoderStart_));
      continue;
    }
    int64_t at = b.source == Source::DecoderFromLabels ? e - 1 : e;
    int64_t v = rt::loadAsInt(in, at);
    if (llvm::Error err = checkId(b, row, at, v))
      return err;
    if (b.source == Source::DecoderFromLabels)
      v = decoderIdOf(v);
    else if (b.source == Source::MaskedLabels)
      v = masking->at(sample, e, v).label;
    else if (b.masked)
      v = masking->at(sample, e, v).input;
    storeInt(out, e, v);
  }
  return llvm::Error::success();
}

} // namespace dtc
