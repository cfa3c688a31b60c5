//===- FuzzCheckpoint.cpp - libFuzzer target for the checkpoint reader ----===//
//
// Bytes -> a step directory -> SafetensorsFile::open / read,
// Checkpoint::open, verify() and read() of every tensor. Any input must end
// in data or a clean llvm::Error: no crash, hang, leak or allocation sized
// by an untrusted field (libFuzzer's -malloc_limit_mb catches those).
//
// Input: sections separated by the 7 bytes "@@DTC@@":
//   section 0: one flags byte, then index.json
//   sections 1..4: rank-00000.safetensors .. rank-00003.safetensors
//                  (later sections are ignored)
// Flags: bit 0 "rehash": before writing index.json, recompute each chunk's
// sha256 and block_sha256 from the rank file bytes it names, so that
// mutated layouts and offsets get past the hash checks into the resharding
// reads; bit 1 "root": open the checkpoint root (through `latest`) rather
// than the step directory. COMMITTED is always written (empty).
// The files go to a new directory under /dev/shm (or $TMPDIR) per input,
// removed after it.
// DTC_FUZZ_VERBOSE=1 prints every error (to check what a seed reaches).
//
//===----------------------------------------------------------------------===//

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/Safetensors.h"
#include "test/fuzz/Scratch.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <openssl/evp.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace rt = dtc::runtime;

namespace {

constexpr llvm::StringLiteral kSeparator = "@@DTC@@";
constexpr int kMaxRanks = 4;
/// Rehashing stops at this many block hashes per chunk (fuzzed block sizes
/// can be 1 byte).
constexpr uint64_t kMaxRehashBlocks = 1 << 12;

std::string sha256Hex(llvm::StringRef bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned size = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &size, EVP_sha256(), nullptr);
  return llvm::toHex(llvm::ArrayRef<uint8_t>(digest, size), true);
}

/// Recomputes the hashes of every chunk whose file and byte range exist.
std::string rehash(llvm::StringRef index,
                   const std::vector<llvm::StringRef> &ranks) {
  auto json = llvm::json::parse(index);
  if (!json) {
    llvm::consumeError(json.takeError());
    return index.str();
  }
  llvm::json::Object *top = json->getAsObject();
  llvm::json::Object *tensors = top ? top->getObject("tensors") : nullptr;
  std::optional<int64_t> block =
      top ? top->getInteger("hash_block_bytes") : std::nullopt;
  if (!tensors || !block || *block < 1)
    return index.str();
  for (auto &[key, value] : *tensors) {
    llvm::json::Object *tensor = value.getAsObject();
    llvm::json::Array *chunks = tensor ? tensor->getArray("chunks") : nullptr;
    if (!chunks)
      continue;
    for (llvm::json::Value &c : *chunks) {
      llvm::json::Object *chunk = c.getAsObject();
      if (!chunk)
        continue;
      std::optional<llvm::StringRef> file = chunk->getString("file");
      std::optional<int64_t> offset = chunk->getInteger("offset");
      std::optional<int64_t> bytes = chunk->getInteger("bytes");
      if (!file || !offset || !bytes || *offset < 0 || *bytes < 0)
        continue;
      int rank = -1;
      for (int r = 0; r < static_cast<int>(ranks.size()); ++r)
        if (*file == rt::rankFileName(r))
          rank = r;
      if (rank < 0)
        continue;
      llvm::StringRef data = ranks[rank];
      uint64_t off = *offset, n = *bytes, b = *block;
      if (off > data.size() || n > data.size() - off ||
          (n + b - 1) / b > kMaxRehashBlocks)
        continue;
      llvm::StringRef range = data.substr(off, n);
      chunk->insert({"sha256", sha256Hex(range)});
      llvm::json::Array blocks;
      for (uint64_t at = 0; at < n; at += b)
        blocks.push_back(sha256Hex(range.substr(at, b)));
      (*chunk)["block_sha256"] = std::move(blocks);
    }
  }
  std::string out;
  llvm::raw_string_ostream os(out);
  os << *json;
  return out;
}

/// Errors are expected; DTC_FUZZ_VERBOSE=1 prints them (to check seeds).
void consume(llvm::Error err) {
  static const bool verbose = std::getenv("DTC_FUZZ_VERBOSE");
  if (verbose && err)
    llvm::errs() << "error: " << llvm::toString(std::move(err)) << "\n";
  llvm::consumeError(std::move(err));
}

/// A split of `shape` in two when some dim allows it (else a ZeRO-style
/// flat split in two, else nothing).
std::optional<rt::ShardLayout> splitLayout(llvm::ArrayRef<int64_t> shape) {
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] < 2 || shape[d] % 2)
      continue;
    std::vector<rt::ShardLayout::DimPart> dims(shape.size());
    dims[d] = {2, 1, 0};
    auto layout = rt::ShardLayout::fromParts(shape, dims);
    if (layout)
      return std::move(*layout);
    consume(layout.takeError());
  }
  auto flat = rt::ShardLayout::fromParts(shape, {}, 2, 1);
  if (flat)
    return std::move(*flat);
  consume(flat.takeError());
  return std::nullopt;
}

void exercise(const std::string &openPath, const std::string &stepDir,
              int ranks) {
  for (int r = 0; r < ranks; ++r) {
    auto file = rt::SafetensorsFile::open(stepDir + "/" + rt::rankFileName(r));
    if (!file) {
      consume(file.takeError());
      continue;
    }
    for (const rt::SafetensorsEntry &e : file->entries()) {
      auto t = file->read(e.name);
      if (!t)
        consume(t.takeError());
    }
  }

  auto ckpt = rt::Checkpoint::open(openPath);
  if (!ckpt) {
    consume(ckpt.takeError());
    return;
  }
  rt::VerifyStats stats;
  consume(ckpt->verify(&stats));
  if (std::getenv("DTC_FUZZ_VERBOSE"))
    llvm::errs() << "opened: " << ckpt->tensors().size() << " tensors, "
                 << stats.chunks << " chunks verified\n";
  for (const auto &[key, tensor] : ckpt->tensors()) {
    auto whole = ckpt->readWhole(key);
    if (!whole) {
      consume(whole.takeError());
      continue;
    }
    // The library accepted the tensor, so its size is backed by the files:
    // allocating a part of it here is safe.
    if (std::optional<rt::ShardLayout> split = splitLayout(tensor.shape)) {
      rt::Tensor part(tensor.dtype, split->localShape());
      if (llvm::Error err = ckpt->read(key, *split, part.ref())) {
        consume(std::move(err));
        continue;
      }
      // Both reads resolve each element to the same chunk: the part must be
      // the whole tensor's elements under the split layout.
      rt::Tensor expected(tensor.dtype, split->localShape());
      split->extract(whole->ref(), expected.ref());
      if (part.bytes() &&
          std::memcmp(part.data(), expected.data(), part.bytes()) != 0) {
        llvm::errs() << key << ": split read differs from the whole read\n";
        std::abort();
      }
    }
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef input(reinterpret_cast<const char *>(data), size);
  llvm::SmallVector<llvm::StringRef, 8> sections;
  input.split(sections, kSeparator);
  llvm::StringRef head = sections[0];
  uint8_t flags = head.empty() ? 0 : head[0];
  llvm::StringRef index = head.drop_front(head.empty() ? 0 : 1);
  std::vector<llvm::StringRef> ranks;
  for (size_t i = 1; i < sections.size() && ranks.size() < kMaxRanks; ++i)
    ranks.push_back(sections[i]);

  std::string dir = dtc::fuzz::makeScratchDir("ckpt");
  std::string step = dir + "/" + rt::stepDirName(1);
  if (::mkdir(step.c_str(), 0755) != 0)
    std::abort();

  dtc::fuzz::writeScratchFile(step + "/index.json",
                              (flags & 1) ? rehash(index, ranks) : index);
  dtc::fuzz::writeScratchFile(step + "/COMMITTED", "");
  for (auto [r, bytes] : llvm::enumerate(ranks))
    dtc::fuzz::writeScratchFile(step + "/" + rt::rankFileName(r), bytes);
  if (flags & 2)
    dtc::fuzz::writeScratchFile(dir + "/latest", rt::stepDirName(1) + "\n");
  exercise((flags & 2) ? dir : step, step, ranks.size());

  for (size_t r = 0; r < ranks.size(); ++r)
    ::unlink((step + "/" + rt::rankFileName(r)).c_str());
  for (const char *name : {"/index.json", "/COMMITTED"})
    ::unlink((step + name).c_str());
  ::unlink((dir + "/latest").c_str());
  ::rmdir(step.c_str());
  ::rmdir(dir.c_str());
  return 0;
}
