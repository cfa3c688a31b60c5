//===- ShardDataTest.cpp - dtc run --data DIR: shards, order, masking -----===//
//
// compiler/run/ShardData.h on its own: the epoch order is a bijection of
// the rows per epoch, deterministic, seeded and uniform; the masked-lm
// masking has HF's statistics (15% chosen; 80/10/10) and is a pure
// function of (seed, sample, position); shards written here with known
// values are read back row by row (sorted file order, int32 -> int64),
// bound by name and role with their defaults (attention mask, decoder
// tokens shifted right, masked labels), and every refusal names the
// culprit.
//
//===----------------------------------------------------------------------===//

#include "compiler/run/ShardData.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/proto/program.pb.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <set>
#include <unistd.h>

using namespace dtc;
namespace rt = dtc::runtime;

namespace {

// --- The epoch order --------------------------------------------------------

TEST(ShardOrder, EveryEpochIsAPermutationOfTheRows) {
  for (int64_t rows : {1, 2, 3, 5, 7, 16, 17, 100, 1000, 4097}) {
    for (uint64_t epoch = 0; epoch < 3; ++epoch) {
      std::vector<int> seen(rows, 0);
      for (int64_t i = 0; i < rows; ++i) {
        int64_t row = shardRowOf(42, rows, epoch * rows + i);
        ASSERT_GE(row, 0);
        ASSERT_LT(row, rows);
        ++seen[row];
      }
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_EQ(seen[r], 1)
            << "rows " << rows << " epoch " << epoch << " row " << r;
    }
  }
}

TEST(ShardOrder, DeterministicSeededAndReshuffledPerEpoch) {
  const int64_t rows = 100;
  std::vector<int64_t> a, again, otherSeed, nextEpoch;
  for (int64_t i = 0; i < rows; ++i) {
    a.push_back(shardRowOf(7, rows, i));
    again.push_back(shardRowOf(7, rows, i));
    otherSeed.push_back(shardRowOf(8, rows, i));
    nextEpoch.push_back(shardRowOf(7, rows, rows + i));
  }
  EXPECT_EQ(a, again);
  EXPECT_NE(a, otherSeed);
  EXPECT_NE(a, nextEpoch);
  // Not the identity (a shuffle at all).
  std::vector<int64_t> identity(rows);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(a, identity);
  // One row is always row 0.
  for (uint64_t s = 0; s < 10; ++s)
    EXPECT_EQ(shardRowOf(s, 1, s * 3), 0);
}

TEST(ShardOrder, FirstSampleIsUniformOverSeeds) {
  // Over 8000 seeds, the first sample of 4 rows lands on each row about
  // 2000 times (binomial sd 39).
  std::vector<int> count(4, 0);
  for (uint64_t seed = 0; seed < 8000; ++seed)
    ++count[shardRowOf(seed, 4, 0)];
  for (int c : count)
    EXPECT_NEAR(c, 2000, 200);
}

TEST(ShardOrder, SplitOfTheBatchDoesNotChangeSamples) {
  // dtc run: rank r of d data-parallel ranks reads global samples
  // micro * mb + r * (mb / d) + row; the union over ranks is one device's
  // rows micro * mb + row, in the same positions.
  const int64_t rows = 37, mb = 8;
  for (int64_t micro = 0; micro < 10; ++micro) {
    std::vector<int64_t> one, split(mb);
    for (int64_t row = 0; row < mb; ++row)
      one.push_back(shardRowOf(3, rows, micro * mb + row));
    for (int64_t rank = 0; rank < 4; ++rank)
      for (int64_t row = 0; row < mb / 4; ++row)
        split[rank * (mb / 4) + row] =
            shardRowOf(3, rows, micro * mb + rank * (mb / 4) + row);
    EXPECT_EQ(one, split);
  }
}

// --- masked-lm --------------------------------------------------------------

TEST(MaskedLm, HuggingFaceStatistics) {
  MaskedLm m;
  m.seed = 11;
  m.maskTokenId = 5000;
  m.probability = 0.15;
  m.vocab = 4000;
  const int64_t samples = 2000, positions = 100;
  int64_t chosen = 0, masked = 0, random = 0, kept = 0;
  for (int64_t s = 0; s < samples; ++s)
    for (int64_t p = 0; p < positions; ++p) {
      const int64_t id = 7 + (s * positions + p) % 3000;
      MaskedLm::Token t = m.at(s, p, id);
      if (t.label == -100) {
        EXPECT_EQ(t.input, id);
        continue;
      }
      ++chosen;
      EXPECT_EQ(t.label, id);
      if (t.input == m.maskTokenId)
        ++masked;
      else if (t.input == id)
        ++kept;
      else {
        ++random;
        EXPECT_GE(t.input, 0);
        EXPECT_LT(t.input, m.vocab);
      }
    }
  const double total = samples * positions;
  EXPECT_NEAR(chosen / total, 0.15, 0.005);
  EXPECT_NEAR(static_cast<double>(masked) / chosen, 0.8, 0.01);
  // A random id equals the original 1 time in 4000: within the tolerance.
  EXPECT_NEAR(static_cast<double>(random) / chosen, 0.1, 0.01);
  EXPECT_NEAR(static_cast<double>(kept) / chosen, 0.1, 0.01);
}

TEST(MaskedLm, PureFunctionOfSeedSampleAndPosition) {
  program::Training training;
  training.set_vocab(100);
  training.set_mask_token_id(99);
  MaskedLm a = llvm::cantFail(MaskedLm::of(training, 1));
  EXPECT_EQ(a.probability, 0.15); // 0 in program.pb: HF's default
  EXPECT_EQ(a.maskTokenId, 99);
  training.set_mask_probability(0.5);
  EXPECT_EQ(llvm::cantFail(MaskedLm::of(training, 1)).probability, 0.5);
  MaskedLm b = a, c = a;
  c.seed = 2;
  int differ = 0;
  for (int64_t s = 0; s < 50; ++s)
    for (int64_t p = 0; p < 50; ++p) {
      MaskedLm::Token x = a.at(s, p, 3), y = b.at(s, p, 3), z = c.at(s, p, 3);
      EXPECT_EQ(x.input, y.input);
      EXPECT_EQ(x.label, y.label);
      differ += x.label != z.label;
    }
  EXPECT_GT(differ, 100);
}

// --- Shards -----------------------------------------------------------------

class Shards : public testing::Test {
protected:
  void SetUp() override {
    llvm::SmallString<128> path;
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("dtc-shards", path));
    dir = std::string(path);
  }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }

  std::string at(llvm::StringRef name) const {
    return (llvm::Twine(dir) + "/" + name).str();
  }

  /// A shard of `rows` samples numbered from `first`: tokens (i32
  /// [rows, 4]) hold 10 * sample + column, labels (i64) 10 * sample +
  /// column + 1, with -100 in the last column of odd samples.
  void writeShard(llvm::StringRef name, int64_t first, int64_t rows,
                  int64_t seq = 4) {
    rt::Tensor tokens(rt::DType::I32, {rows, seq});
    rt::Tensor labels(rt::DType::I64, {rows, seq});
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < seq; ++c) {
        int64_t sample = first + r;
        tokens.as<int32_t>()[r * seq + c] = 10 * sample + c;
        labels.as<int64_t>()[r * seq + c] =
            c == seq - 1 && sample % 2 ? -100 : 10 * sample + c + 1;
      }
    ASSERT_FALSE(static_cast<bool>(rt::writeSafetensors(
        at(name), {{"tokens", tokens.ref()}, {"labels", labels.ref()}})));
  }

  static std::string errorOf(llvm::Error e) {
    return e ? llvm::toString(std::move(e)) : std::string("(no error)");
  }
  template <typename T> static std::string errorOf(llvm::Expected<T> v) {
    return errorOf(v.takeError());
  }

  std::string dir;
};

TEST_F(Shards, ReadInSortedFileOrder) {
  // Written out of order; read as a (rows 0-1), b (rows 2-4).
  writeShard("b.safetensors", 2, 3);
  writeShard("a.safetensors", 0, 2);
  auto set = ShardSet::open(dir);
  ASSERT_TRUE(static_cast<bool>(set)) << errorOf(set.takeError());
  const ShardSet &s = **set;
  EXPECT_EQ(s.rows(), 5);
  EXPECT_EQ(s.tensorList(), "'labels', 'tokens'");
  int tokens = s.find("tokens");
  ASSERT_GE(tokens, 0);
  for (int64_t row = 0; row < 5; ++row) {
    int32_t first;
    std::memcpy(&first, s.rowData(tokens, row), 4);
    EXPECT_EQ(first, 10 * row);
    EXPECT_EQ(s.fileOf(row), row < 2 ? "a.safetensors" : "b.safetensors");
  }
  llvm::json::Array expected{
      llvm::json::Object{{"file", "a.safetensors"}, {"rows", 2}},
      llvm::json::Object{{"file", "b.safetensors"}, {"rows", 3}}};
  EXPECT_EQ(s.identity(), expected);
  EXPECT_EQ(describeShards(s.identity()),
            "2 shards, 5 rows (a.safetensors 2, b.safetensors 3)");
}

TEST_F(Shards, FeedsEveryArgumentItsRow) {
  writeShard("a.safetensors", 0, 2);
  writeShard("b.safetensors", 2, 3);
  auto set = ShardSet::open(dir);
  ASSERT_TRUE(static_cast<bool>(set)) << errorOf(set.takeError());
  program::Training training;
  training.set_vocab(1000);
  training.set_decoder_start_token_id(7);
  // input_ids by role (no tensor of that name), labels by name, the
  // defaults for the mask and the decoder.
  std::vector<DataArgument> args{
      {"input_ids", "tokens", rt::DType::I64, {4}},
      {"labels", "labels", rt::DType::I64, {4}},
      {"attention_mask", "attention_mask", rt::DType::I64, {4}},
      {"decoder_input_ids", "decoder_tokens", rt::DType::I32, {4}}};
  auto feeder = ShardFeeder::bind(*set, args, training);
  ASSERT_TRUE(static_cast<bool>(feeder)) << errorOf(feeder.takeError());
  for (uint64_t sample = 0; sample < 15; ++sample) {
    const int64_t row = shardRowOf(5, 5, sample);
    rt::Tensor out(rt::DType::I64, {4}), dec(rt::DType::I32, {4});
    ASSERT_FALSE(static_cast<bool>(feeder->fill(
        feeder->indexOf("input_ids", "tokens"), 5, sample, out.ref())));
    for (int64_t c = 0; c < 4; ++c)
      EXPECT_EQ(out.as<int64_t>()[c], 10 * row + c);
    ASSERT_FALSE(static_cast<bool>(feeder->fill(
        feeder->indexOf("labels", "labels"), 5, sample, out.ref())));
    for (int64_t c = 0; c < 4; ++c)
      EXPECT_EQ(out.as<int64_t>()[c],
                c == 3 && row % 2 ? -100 : 10 * row + c + 1);
    ASSERT_FALSE(static_cast<bool>(
        feeder->fill(feeder->indexOf("attention_mask", "attention_mask"), 5,
                     sample, out.ref())));
    for (int64_t c = 0; c < 4; ++c)
      EXPECT_EQ(out.as<int64_t>()[c], 1);
    // shift_tokens_right: [start, labels[0..2]]; -100 only ever in the
    // last label column, which the shift drops.
    ASSERT_FALSE(static_cast<bool>(
        feeder->fill(feeder->indexOf("decoder_input_ids", "decoder_tokens"), 5,
                     sample, dec.ref())));
    EXPECT_EQ(dec.as<int32_t>()[0], 7);
    for (int64_t c = 1; c < 4; ++c)
      EXPECT_EQ(dec.as<int32_t>()[c], 10 * row + c);
  }
}

TEST_F(Shards, DecoderTokensReplaceIgnoredLabelsByPad) {
  rt::Tensor labels(rt::DType::I64, {1, 4});
  int64_t values[] = {3, -100, -100, 4};
  std::memcpy(labels.data(), values, sizeof values);
  ASSERT_FALSE(static_cast<bool>(
      rt::writeSafetensors(at("a.safetensors"), {{"labels", labels.ref()}})));
  auto set = ShardSet::open(dir);
  ASSERT_TRUE(static_cast<bool>(set));
  program::Training training;
  training.set_vocab(10);
  training.set_decoder_start_token_id(2);
  std::vector<DataArgument> args{{"labels", "labels", rt::DType::I64, {4}},
                                 {"", "decoder_tokens", rt::DType::I64, {4}}};
  auto feeder = ShardFeeder::bind(*set, args, training);
  ASSERT_TRUE(static_cast<bool>(feeder)) << errorOf(feeder.takeError());
  rt::Tensor out(rt::DType::I64, {4});
  ASSERT_FALSE(static_cast<bool>(feeder->fill(1, 0, 0, out.ref())));
  EXPECT_EQ(std::vector<int64_t>(out.as<int64_t>(), out.as<int64_t>() + 4),
            (std::vector<int64_t>{2, 3, 0, 0}));
}

TEST_F(Shards, MaskedLmWithoutLabelsMasksTheTokens) {
  writeShard("a.safetensors", 0, 5, 64);
  // Drop the labels: a shard of tokens only.
  rt::Tensor tokens(rt::DType::I32, {5, 64});
  {
    auto withLabels = ShardSet::open(dir);
    ASSERT_TRUE(static_cast<bool>(withLabels));
    std::memcpy(tokens.data(),
                (*withLabels)->rowData((*withLabels)->find("tokens"), 0),
                tokens.bytes());
  }
  ASSERT_FALSE(static_cast<bool>(
      rt::writeSafetensors(at("a.safetensors"), {{"tokens", tokens.ref()}})));
  auto set = ShardSet::open(dir);
  ASSERT_TRUE(static_cast<bool>(set)) << errorOf(set.takeError());
  program::Training training;
  training.set_vocab(1000);
  training.set_objective("masked-lm");
  training.set_mask_token_id(999);
  std::vector<DataArgument> args{{"input_ids", "tokens", rt::DType::I64, {64}},
                                 {"labels", "labels", rt::DType::I64, {64}}};
  auto feeder = ShardFeeder::bind(*set, args, training);
  ASSERT_TRUE(static_cast<bool>(feeder)) << errorOf(feeder.takeError());
  MaskedLm m = llvm::cantFail(MaskedLm::of(training, 9));
  int chosen = 0;
  for (uint64_t sample = 0; sample < 10; ++sample) {
    const int64_t row = shardRowOf(9, 5, sample);
    rt::Tensor in(rt::DType::I64, {64}), lab(rt::DType::I64, {64});
    ASSERT_FALSE(static_cast<bool>(feeder->fill(0, 9, sample, in.ref())));
    ASSERT_FALSE(static_cast<bool>(feeder->fill(1, 9, sample, lab.ref())));
    for (int64_t c = 0; c < 64; ++c) {
      const int64_t id = 10 * row + c;
      MaskedLm::Token t = m.at(sample, c, id);
      EXPECT_EQ(in.as<int64_t>()[c], t.input);
      EXPECT_EQ(lab.as<int64_t>()[c], t.label);
      chosen += t.label != -100;
    }
  }
  EXPECT_GT(chosen, 40); // about 96 of 640
  EXPECT_LT(chosen, 160);
}

TEST_F(Shards, Refusals) {
  EXPECT_NE(errorOf(ShardSet::open(dir))
                .find("no *.safetensors shards in "
                      "the directory"),
            std::string::npos);
  writeShard("a.safetensors", 0, 2);
  auto set = ShardSet::open(dir);
  ASSERT_TRUE(static_cast<bool>(set));
  program::Training training;
  training.set_vocab(1000);
  std::vector<DataArgument> shape{{"input_ids", "tokens", rt::DType::I64, {8}}};
  EXPECT_EQ(errorOf(ShardFeeder::bind(*set, shape, training)),
            "--data " + dir +
                ": a.safetensors: tensor 'tokens' holds samples of shape [4], "
                "argument 'input_ids' (tokens) expects [8]; write it with "
                "that shape per sample (dim 0 the sample)");
  std::vector<DataArgument> dtype{{"labels", "labels", rt::DType::F32, {4}}};
  EXPECT_EQ(errorOf(ShardFeeder::bind(*set, dtype, training)),
            "--data " + dir +
                ": a.safetensors: tensor 'labels' is I64, the labels argument "
                "takes F32; store it as F32 (only I32<->I64, I8/BOOL->I64 and "
                "F16/BF16->F32 convert)");
  std::vector<DataArgument> missing{
      {"pixel_values", "input", rt::DType::F32, {3}}};
  EXPECT_EQ(errorOf(ShardFeeder::bind(*set, missing, training)),
            "--data " + dir +
                ": no tensor for argument 'pixel_values' (input); the shards "
                "hold 'labels', 'tokens': name one 'pixel_values' or 'input'");
  // An id outside the vocabulary is named with its shard and row: row 1
  // holds 10..13.
  training.set_vocab(12);
  std::vector<DataArgument> ids{{"", "tokens", rt::DType::I64, {4}}};
  auto feeder = ShardFeeder::bind(*set, ids, training);
  ASSERT_TRUE(static_cast<bool>(feeder));
  rt::Tensor out(rt::DType::I64, {4});
  // Samples 0 and 1 are rows 0 and 1 in some order.
  std::string range = errorOf(feeder->fill(0, 0, 0, out.ref()));
  if (range == "(no error)")
    range = errorOf(feeder->fill(0, 0, 1, out.ref()));
  EXPECT_EQ(range, "--data " + dir +
                       ": a.safetensors: tensor 'tokens' holds 12 at element "
                       "2 of sample row 1, outside the model's vocabulary "
                       "[0, 12); fix the data");
}

TEST_F(Shards, RefusesBadFiles) {
  writeShard("a.safetensors", 0, 2);
  // Another shard with another per-sample shape.
  writeShard("b.safetensors", 2, 2, 5);
  EXPECT_EQ(errorOf(ShardSet::open(dir)),
            "--data " + dir +
                ": b.safetensors: tensor 'labels' is I64 [5] per sample, in "
                "a.safetensors I64 [4]; every shard holds the same tensors");
  llvm::sys::fs::remove(at("b.safetensors"));
  // A directory that looks like a shard.
  ASSERT_FALSE(llvm::sys::fs::create_directory(at("c.safetensors")));
  EXPECT_EQ(errorOf(ShardSet::open(dir)),
            "--data " + dir +
                ": c.safetensors is not a regular file; only safetensors "
                "files may end in .safetensors there");
  llvm::sys::fs::remove(at("c.safetensors"));
  // A link out of the directory.
  llvm::SmallString<128> outside;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("dtc-outside", outside));
  std::string target = (outside + "/x.safetensors").str();
  ASSERT_FALSE(llvm::sys::fs::copy_file(at("a.safetensors"), target));
  ASSERT_FALSE(llvm::sys::fs::create_link(target, at("d.safetensors")));
  std::string e = errorOf(ShardSet::open(dir));
  EXPECT_NE(e.find("d.safetensors is a link to"), std::string::npos) << e;
  EXPECT_NE(e.find("outside the directory; copy the shard into it"),
            std::string::npos)
      << e;
  llvm::sys::fs::remove_directories(outside);
  llvm::sys::fs::remove(at("d.safetensors"));
  // A link inside the directory is a shard like any other.
  ASSERT_FALSE(
      llvm::sys::fs::create_link(at("a.safetensors"), at("e.safetensors")));
  auto set = ShardSet::open(dir);
  ASSERT_TRUE(static_cast<bool>(set)) << errorOf(set.takeError());
  EXPECT_EQ((*set)->rows(), 4);
  // A truncated shard: its header promises more than the file holds.
  llvm::sys::fs::remove(at("e.safetensors"));
  ASSERT_EQ(::truncate(at("a.safetensors").c_str(), 100), 0);
  e = errorOf(ShardSet::open(dir));
  EXPECT_NE(e.find("a.safetensors"), std::string::npos) << e;
}

} // namespace
