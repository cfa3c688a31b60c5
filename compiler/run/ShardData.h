//===- ShardData.h - dtc run --data DIR: safetensors shards -----*- C++ -*-===//
//
// Training data for any model (issue 55): a directory of `*.safetensors`
// shards whose tensors are named by the step function's data arguments
// (their graph input name, else their role), dim 0 the sample. The shards,
// in sorted file-name order, make one space of N rows; global sample s is
// row perm_{s / N}(s mod N) of a seeded permutation per epoch, so every
// epoch sees every row once and the sample is a pure function of (seed, s):
// resumable from the checkpoint's samples-seen and seed, and the same
// however ranks and micro-batches split the batch. Also the masked-lm
// masking (HF DataCollatorForLanguageModeling) that token files and shards
// without labels share. docs/user-guide.md "Training data".
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_RUN_SHARDDATA_H
#define DTC_COMPILER_RUN_SHARDDATA_H

#include "runtime/core/Tensor.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtc {
namespace program {
class Training;
} // namespace program

/// splitmix64: a well-mixed 64-bit hash of one value.
uint64_t splitMix64(uint64_t x);

/// The row of an N-row sample space that global sample `sample` reads:
/// epoch sample / N, position sample % N through that epoch's seeded
/// bijection of [0, N) (a Feistel network over the next even power of two,
/// cycle-walked into [0, N)). O(1) time and memory per sample.
int64_t shardRowOf(uint64_t seed, int64_t rows, uint64_t sample);

/// masked-lm masking (HF DataCollatorForLanguageModeling): each position of
/// a sample is chosen with `probability`; a chosen one's label is its id
/// (others -100) and its input the mask id (80%), a random id in [0, vocab)
/// (10%) or itself (10%). A pure function of (seed, sample, position).
struct MaskedLm {
  uint64_t seed = 0;
  int64_t maskTokenId = 0;
  double probability = 0.15;
  int64_t vocab = 1;

  /// Training's fields (a probability of 0 means HF's default 0.15).
  /// Refused when the bundle has no mask id (compiled without
  /// --mask-token-id): the data must then bring its labels.
  static llvm::Expected<MaskedLm> of(const program::Training &training,
                                     uint64_t seed);

  struct Token {
    int64_t input, label;
  };
  Token at(uint64_t sample, int64_t position, int64_t id) const;
};

/// The label HF's shift_tokens_right puts into a decoder input: pad id 0
/// where the labels hold -100.
inline int64_t decoderIdOf(int64_t label) { return label == -100 ? 0 : label; }

/// Writes `v` into element `i` of an integer (i64/i32/i8/bool) or float
/// tensor.
void storeInt(const runtime::TensorRef &t, int64_t i, int64_t v);
/// Element `i` of an integer tensor (any width), as int64.
int64_t loadInt(const runtime::TensorRef &t, int64_t i);
void storeFloat(const runtime::TensorRef &t, int64_t i, float v);

/// One tensor of every shard: its name, dtype and per-sample shape.
struct ShardTensor {
  std::string name;
  runtime::DType dtype = runtime::DType::F32;
  llvm::SmallVector<int64_t, 6> rowShape;
  int64_t rowBytes = 0;
};

/// A directory of shards, memory-mapped: every shard holds the same tensors
/// (names, dtypes, per-sample shapes), all with its row count as dim 0.
class ShardSet {
public:
  /// Reads every shard's header (checked against its file size) and maps
  /// it. Bad input: no shards, a non-regular file or a link out of `dir`,
  /// a damaged header, shards that disagree.
  static llvm::Expected<std::shared_ptr<ShardSet>> open(llvm::StringRef dir);

  llvm::StringRef dir() const { return dir_; }
  int64_t rows() const { return rows_; }
  llvm::ArrayRef<ShardTensor> tensors() const { return tensors_; }
  /// The index of tensor `name`, or -1.
  int find(llvm::StringRef name) const;
  /// "'input_ids', 'labels'": what the shards hold, for messages.
  std::string tensorList() const;
  /// The first shard's file name (the one messages about the common
  /// schema name).
  llvm::StringRef firstFile() const { return shards_.front().file; }
  /// Row `row` of the whole space of tensor `tensor`, and its shard's name.
  const char *rowData(int tensor, int64_t row) const;
  llvm::StringRef fileOf(int64_t row) const;
  /// What a checkpoint records to refuse a resume on other data: every
  /// shard's file name and row count, in order.
  llvm::json::Array identity() const;

private:
  struct Shard {
    std::string file;
    int64_t firstRow = 0, rows = 0;
    std::unique_ptr<llvm::MemoryBuffer> buffer;
    std::vector<uint64_t> offsets; ///< per tensor of tensors_
  };
  const Shard &shardOf(int64_t row) const;

  std::string dir_;
  int64_t rows_ = 0;
  std::vector<ShardTensor> tensors_;
  std::vector<Shard> shards_;
};

/// "3 shards, 96 rows (a.safetensors 32, b.safetensors 32, ...)".
std::string describeShards(const llvm::json::Array &identity);

/// A data argument of the step function, with its global per-sample shape.
struct DataArgument {
  std::string name, feed;
  runtime::DType dtype = runtime::DType::F32;
  llvm::SmallVector<int64_t, 6> rowShape;
  /// "'input_ids' (tokens)" for messages.
  std::string text() const;
};

/// How each data argument of a job takes its rows from a shard set.
class ShardFeeder {
public:
  /// Binds `arguments` (every data argument of every rank's step, so that
  /// a pipeline's last stage finds the tokens its masked-lm labels come
  /// from) to tensors of `shards`: by name, else by role, else a default
  /// (attention_mask: ones; decoder_tokens: the labels shifted right;
  /// masked-lm labels: masked tokens). Bad input: a missing tensor, a
  /// dtype that does not convert losslessly, another per-sample shape.
  static llvm::Expected<ShardFeeder>
  bind(std::shared_ptr<const ShardSet> shards,
       llvm::ArrayRef<DataArgument> arguments,
       const program::Training &training);

  /// The argument's index in bind()'s list; -1 when absent.
  int indexOf(llvm::StringRef name, llvm::StringRef feed) const;
  /// Writes argument `argument`'s whole per-sample row for global sample
  /// `sample` into `out` (its rowShape, its dtype). Bad input: an id
  /// outside the vocabulary.
  llvm::Error fill(int argument, uint64_t seed, uint64_t sample,
                   const runtime::TensorRef &out) const;

private:
  enum class Source { Tensor, Ones, DecoderFromLabels, MaskedLabels };
  struct Binding {
    DataArgument argument;
    Source source = Source::Tensor;
    int tensor = -1;     ///< the tensor read (tokens for MaskedLabels)
    bool masked = false; ///< masked-lm tokens: the masked inputs
  };
  llvm::Error checkId(const Binding &b, int64_t row, int64_t element,
                      int64_t id) const;

  std::shared_ptr<const ShardSet> shards_;
  std::vector<Binding> bindings_;
  int64_t vocab_ = 0, decoderStart_ = 0;
  // A classifier's vocab is its classes: it bounds the labels, not the
  // token ids (the embedding's kernel checks those).
  bool classify_ = false;
  std::optional<MaskedLm> masking_; ///< its seed is set per fill
};

} // namespace dtc

#endif // DTC_COMPILER_RUN_SHARDDATA_H
