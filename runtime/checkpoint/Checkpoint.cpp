//===- Checkpoint.cpp - Sharded checkpoints that reshard on load ----------===//

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/support/Error.h"
#include "runtime/support/Json.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <numeric>
#include <openssl/evp.h>
#include <unistd.h>

namespace dtc::runtime {

namespace fs = llvm::sys::fs;
namespace path = llvm::sys::path;

namespace {

constexpr llvm::StringLiteral kSchema = "dtc.checkpoint/1";
constexpr llvm::StringLiteral kManifestSchema = "dtc.checkpoint.manifest/1";
/// Reads are issued in spans of at most this many bytes.
constexpr uint64_t kMaxSpanBytes = 64 << 20;

llvm::Error corrupt(const llvm::Twine &message) {
  return dtc::failureText(message);
}

std::string join(llvm::StringRef a, llvm::StringRef b) {
  llvm::SmallString<256> p(a);
  path::append(p, b);
  return std::string(p);
}

std::string hex(llvm::ArrayRef<uint8_t> bytes) {
  return llvm::toHex(bytes, /*LowerCase=*/true);
}

/// SHA-256 by OpenSSL's libcrypto, which uses the CPU's SHA instructions:
/// 1.5 GB/s here against 0.2 GB/s for LLVM's portable code, whose hashing
/// was most of a save's time.
class Sha256 {
public:
  Sha256() : ctx_(EVP_MD_CTX_new()) {
    EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr);
  }
  Sha256(const Sha256 &) = delete;
  Sha256 &operator=(const Sha256 &) = delete;
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  void update(llvm::ArrayRef<uint8_t> bytes) {
    EVP_DigestUpdate(ctx_, bytes.data(), bytes.size());
  }
  std::string finalHex() {
    uint8_t digest[EVP_MAX_MD_SIZE];
    unsigned size = 0;
    EVP_DigestFinal_ex(ctx_, digest, &size);
    return hex(llvm::ArrayRef<uint8_t>(digest, size));
  }

private:
  EVP_MD_CTX *ctx_;
};

std::string sha256Hex(llvm::ArrayRef<uint8_t> bytes) {
  Sha256 hash;
  hash.update(bytes);
  return hash.finalHex();
}

std::string shapeText(llvm::ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (auto [i, d] : llvm::enumerate(shape))
    s += (i ? "," : "") + std::to_string(d);
  return s + "]";
}

llvm::Expected<llvm::json::Value> readJson(llvm::StringRef file) {
  auto buffer = llvm::MemoryBuffer::getFile(file);
  if (!buffer) {
    if (buffer.getError() == std::errc::no_such_file_or_directory)
      return corrupt(file + ": missing");
    return ioError(file + ": cannot read: " + buffer.getError().message());
  }
  auto json = parseJson((*buffer)->getBuffer());
  if (!json)
    return corrupt(file +
                   ": invalid JSON: " + llvm::toString(json.takeError()));
  return std::move(*json);
}

/// The number of a chunk among all chunks of its layout family: its part
/// index per dim (mixed radix, outermost first), then its flat part.
int64_t chunkId(const ShardLayout &layout) {
  int64_t id = 0;
  for (const ShardLayout::DimPart &part : layout.dimParts())
    id = id * part.parts + part.index;
  return id * layout.flatParts() + layout.flatIndex();
}

/// How a tensor is cut, whatever part a rank holds: parts and block per dim
/// (block normalized to 0 on uncut dims) and the flat parts.
std::vector<int64_t> familyKey(const ShardLayout &layout) {
  std::vector<int64_t> key;
  for (const ShardLayout::DimPart &part : layout.dimParts()) {
    key.push_back(part.parts);
    key.push_back(part.parts > 1 ? part.block : 0);
  }
  key.push_back(layout.flatParts());
  return key;
}

/// The global index along `dim` of shard index `i` (ShardLayout's rule).
int64_t globalIndexOf(const ShardLayout &layout, size_t dim, int64_t i) {
  const ShardLayout::DimPart &part = layout.dimParts()[dim];
  if (part.parts == 1)
    return i;
  int64_t run = part.block ? part.block : layout.globalShape()[dim];
  int64_t piece = run / part.parts;
  return i / piece * run + part.index * piece + i % piece;
}

/// Calls fn(stored offset, global flat offset, count) for runs of elements
/// contiguous in both the layout's stored part and the whole tensor, in
/// stored order (at most one row of the innermost dim at a time). Stops
/// when fn returns false.
template <typename Fn> void forEachRun(const ShardLayout &layout, Fn fn) {
  llvm::ArrayRef<int64_t> shard = layout.shardShape();
  llvm::ArrayRef<int64_t> global = layout.globalShape();
  int64_t stored = numElements(layout.localShape());
  if (stored == 0)
    return;
  int64_t lo = layout.flatIndex() * stored, hi = lo + stored;
  size_t rank = shard.size();
  if (rank == 0) {
    fn(0, 0, 1);
    return;
  }
  int64_t inner = shard.back();
  const ShardLayout::DimPart &last = layout.dimParts().back();
  int64_t piece = last.parts > 1
                      ? (last.block ? last.block : global.back()) / last.parts
                      : inner;
  llvm::SmallVector<int64_t, 6> globalStrides = stridesOf(global);
  for (int64_t row = lo / inner; row * inner < hi; ++row) {
    int64_t base = 0, rest = row;
    for (size_t d = rank - 1; d-- > 0;) {
      base += globalIndexOf(layout, d, rest % shard[d]) * globalStrides[d];
      rest /= shard[d];
    }
    for (int64_t i = 0; i < inner; i += piece) {
      int64_t a = row * inner + i, b = a + std::min(piece, inner - i);
      int64_t from = std::max(a, lo), to = std::min(b, hi);
      if (from < to &&
          !fn(from - lo, base + globalIndexOf(layout, rank - 1, i) + (from - a),
              to - from))
        return;
    }
  }
}

/// The chunks of one tensor cut the same way, and how to find the chunk
/// and place holding a global element.
struct Family {
  const ShardLayout *shape = nullptr;  ///< any chunk's layout: the geometry
  std::map<int64_t, size_t> chunkById; ///< chunk id -> index in `chunks`
  llvm::SmallVector<int64_t, 6> shardStrides, globalStrides;
  int64_t flatElements = 0;

  struct Place {
    int64_t id, stored, count;
  };
  /// Where global element `g` sits: chunk id, offset in the chunk's stored
  /// elements, and how many elements from there stay contiguous in both.
  Place locate(int64_t g) const {
    llvm::ArrayRef<int64_t> global = shape->globalShape();
    llvm::ArrayRef<int64_t> shard = shape->shardShape();
    llvm::ArrayRef<ShardLayout::DimPart> dims = shape->dimParts();
    size_t rank = global.size();
    int64_t id = 0, radix = 1, offset = 0, count = 1;
    for (size_t d = rank; d-- > 0;) {
      int64_t gd = g / globalStrides[d] % global[d];
      const ShardLayout::DimPart &part = dims[d];
      int64_t run = part.parts > 1 && part.block ? part.block : global[d];
      int64_t piece = run / part.parts;
      int64_t within = gd % run;
      int64_t index = within / piece;
      int64_t local = gd / run * piece + within % piece;
      offset += local * shardStrides[d];
      id += index * radix;
      radix *= part.parts;
      if (d == rank - 1)
        count = piece - within % piece;
    }
    (void)shard;
    int64_t flat = offset / flatElements;
    int64_t stored = offset % flatElements;
    count = std::min(count, flatElements - stored);
    return {id * shape->flatParts() + flat, stored, count};
  }
};

std::vector<Family> familiesOf(const std::vector<CheckpointChunk> &chunks) {
  std::map<std::vector<int64_t>, size_t> byKey;
  std::vector<Family> families;
  for (auto [i, chunk] : llvm::enumerate(chunks)) {
    auto [it, added] =
        byKey.try_emplace(familyKey(chunk.layout), families.size());
    if (added) {
      Family f;
      f.shape = &chunk.layout;
      f.shardStrides = stridesOf(chunk.layout.shardShape());
      f.globalStrides = stridesOf(chunk.layout.globalShape());
      f.flatElements =
          numElements(chunk.layout.shardShape()) / chunk.layout.flatParts();
      families.push_back(std::move(f));
    }
    families[it->second].chunkById.try_emplace(chunkId(chunk.layout), i);
  }
  return families;
}

/// A byte range a read copies: offset in the chunk, offset in the output.
struct Segment {
  uint64_t src, dst, bytes;
};

/// The byte segments, per chunk of `t`, holding `target`'s elements. Stops
/// at the first element no chunk holds: each run before it takes at least
/// one chunk element, so the work is bounded by the chunks' size, not by
/// the shape the index claims.
llvm::Error planRead(const CheckpointTensor &t, llvm::StringRef key,
                     const ShardLayout &target,
                     std::vector<std::vector<Segment>> &segments) {
  std::vector<Family> families = familiesOf(t.chunks);
  segments.assign(t.chunks.size(), {});
  uint64_t width = dtypeSize(t.dtype);
  std::optional<int64_t> missing;
  forEachRun(target, [&](int64_t stored, int64_t global, int64_t count) {
    while (count > 0) {
      std::optional<size_t> chunk;
      Family::Place place{};
      for (const Family &f : families) {
        place = f.locate(global);
        auto it = f.chunkById.find(place.id);
        if (it != f.chunkById.end()) {
          chunk = it->second;
          break;
        }
      }
      if (!chunk) {
        missing = global;
        return false;
      }
      int64_t n = std::min(count, place.count);
      std::vector<Segment> &list = segments[*chunk];
      uint64_t src = place.stored * width, dst = stored * width;
      if (!list.empty() && list.back().src + list.back().bytes == src &&
          list.back().dst + list.back().bytes == dst)
        list.back().bytes += n * width;
      else
        list.push_back({src, dst, n * width});
      stored += n;
      global += n;
      count -= n;
    }
    return true;
  });
  if (missing)
    return corrupt(key + ": no chunk holds element " + llvm::Twine(*missing) +
                   " (the checkpoint's index is incomplete)");
  return llvm::Error::success();
}

/// Open files of one read, closed together.
class FileSet {
public:
  explicit FileSet(std::string dir) : dir_(std::move(dir)) {}
  ~FileSet() {
    for (auto &[name, fd] : fds_)
      ::close(fd);
  }
  llvm::Expected<int> get(const std::string &name) {
    auto it = fds_.find(name);
    if (it != fds_.end())
      return it->second;
    std::string file = join(dir_, name);
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT)
        return corrupt(file + ": missing");
      return ioError(file + ": cannot open: " + std::strerror(errno));
    }
    fds_[name] = fd;
    return fd;
  }

private:
  std::string dir_;
  std::map<std::string, int> fds_;
};

/// Reads the blocks [first, last] of `chunk` that `visit` asks for, checks
/// each block's hash, and hands each span to visit(byte offset in the
/// chunk, bytes). `blocks` is sorted and unique.
llvm::Error
readBlocks(const CheckpointTensor &tensor, const CheckpointChunk &chunk,
           uint64_t blockBytes, llvm::ArrayRef<uint64_t> blocks, FileSet &files,
           llvm::function_ref<void(uint64_t, llvm::ArrayRef<uint8_t>)> visit) {
  auto fd = files.get(chunk.file);
  if (!fd)
    return fd.takeError();
  uint64_t maxBlocks = std::max<uint64_t>(1, kMaxSpanBytes / blockBytes);
  std::vector<uint8_t> buffer;
  for (size_t i = 0; i < blocks.size();) {
    size_t j = i + 1;
    while (j < blocks.size() && blocks[j] == blocks[j - 1] + 1 &&
           j - i < maxBlocks)
      ++j;
    uint64_t begin = blocks[i] * blockBytes;
    uint64_t end = std::min(chunk.bytes, (blocks[j - 1] + 1) * blockBytes);
    buffer.resize(end - begin);
    if (llvm::Error err = preadAll(*fd, buffer.data(), buffer.size(),
                                   chunk.offset + begin, chunk.file))
      return llvm::handleErrors(
          std::move(err), [&](const llvm::ErrorInfoBase &e) {
            return llvm::createStringError(e.convertToErrorCode(),
                                           tensor.key + ": " + e.message());
          });
    for (size_t k = i; k < j; ++k) {
      uint64_t a = blocks[k] * blockBytes;
      uint64_t b = std::min(chunk.bytes, a + blockBytes);
      llvm::ArrayRef<uint8_t> bytes(buffer.data() + (a - begin), b - a);
      if (sha256Hex(bytes) != chunk.blockSha256[blocks[k]])
        return corrupt(
            tensor.key + ": " + chunk.file + ": hash mismatch in bytes [" +
            llvm::Twine(chunk.offset + a) + ", " +
            llvm::Twine(chunk.offset + b) + "); the file is corrupt");
    }
    visit(begin, buffer);
    i = j;
  }
  return llvm::Error::success();
}

} // namespace

std::string stepDirName(int64_t step) {
  return llvm::formatv("step-{0:d8}", step).str();
}

std::string rankFileName(int rank) {
  return llvm::formatv("rank-{0:d5}.safetensors", rank).str();
}

static std::string manifestName(int rank) {
  return llvm::formatv("rank-{0:d5}.json", rank).str();
}

std::optional<std::string> checkpointKey(const program::Variable &var) {
  if (var.role() == "grad")
    return std::nullopt;
  std::string parameter =
      var.parameter().empty() ? var.name() : var.parameter();
  if (var.role() == "parameter" || var.role().empty())
    return parameter;
  return var.role() + ":" + parameter;
}

// --- Which rank writes a chunk ----------------------------------------------

llvm::Expected<ChunkWriters> ChunkWriters::of(const program::Program &p) {
  auto mesh = Mesh::parse(p.mesh());
  if (!mesh)
    return mesh.takeError();
  ChunkWriters table;
  // (key, chunk layout) pairs already written by a lower rank.
  std::set<std::string> seen;
  for (int rank = 0; rank < p.world_size(); ++rank) {
    const program::RankProgram *program = rankProgramOf(p, rank);
    if (!program)
      continue;
    for (const program::Variable &v : program->variables()) {
      std::optional<std::string> key = checkpointKey(v);
      if (!key)
        continue;
      auto layout = ShardLayout::of(v, *mesh, rank);
      if (!layout)
        return layout.takeError();
      std::string chunk;
      llvm::raw_string_ostream os(chunk);
      os << *key << "\n" << llvm::json::Value(layout->chunkJson());
      os.flush();
      if (seen.insert(chunk).second)
        table.writers_.insert({rank, v.name()});
    }
  }
  return table;
}

bool ChunkWriters::writes(int rank, llvm::StringRef variable) const {
  return writers_.count({rank, variable.str()});
}

llvm::Expected<bool> writesChunk(const program::Program &program,
                                 const Mesh &mesh, const program::Variable &var,
                                 int rank) {
  (void)mesh; // the program carries its mesh
  auto table = ChunkWriters::of(program);
  if (!table)
    return table.takeError();
  return table->writes(rank, var.name());
}

// --- Writing ----------------------------------------------------------------

CheckpointWriter::CheckpointWriter(std::string root, int rank, int worldSize,
                                   std::string mesh, WriterOptions options)
    : root_(std::move(root)), mesh_(std::move(mesh)), rank_(rank),
      worldSize_(worldSize), options_(std::move(options)) {
  if (options_.hashBlockBytes == 0)
    options_.hashBlockBytes = 1 << 20;
}

CheckpointWriter::~CheckpointWriter() { llvm::consumeError(finish()); }

bool CheckpointWriter::busy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return running_;
}

llvm::Error CheckpointWriter::finish() {
  if (thread_.joinable())
    thread_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  if (!result_)
    return llvm::Error::success();
  llvm::Error err = std::move(*result_);
  result_.reset();
  return err;
}

llvm::Error CheckpointWriter::startSave(int64_t step,
                                        std::vector<SaveItem> items,
                                        llvm::json::Object meta) {
  // One save at a time; a failed previous save is reported, not hidden.
  if (llvm::Error err = finish())
    return err;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = true;
  }
  thread_ = std::thread(
      [this, step, items = std::move(items), meta = std::move(meta)]() mutable {
        llvm::Error err = save(step, std::move(items), std::move(meta));
        std::lock_guard<std::mutex> lock(mutex_);
        result_.emplace(std::move(err));
        running_ = false;
      });
  return llvm::Error::success();
}

llvm::Error CheckpointWriter::save(int64_t step, std::vector<SaveItem> items,
                                   llvm::json::Object meta) {
  std::string dir = join(root_, stepDirName(step));
  if (std::error_code ec = fs::create_directories(dir))
    return ioError(dir + ": cannot create: " + ec.message());
  if (fs::exists(join(dir, "COMMITTED")))
    return corrupt(dir + ": already committed; not overwriting a committed "
                         "checkpoint (save to another root or step)");
  // A manifest of ours left by an interrupted save must not be merged.
  fs::remove(join(dir, manifestName(rank_)));

  // The rank file's tensors: `key@chunk`, each chunk once, in name order.
  struct Entry {
    std::string name;
    SaveItem *item;
  };
  std::vector<Entry> entries;
  std::set<std::string> names;
  for (SaveItem &item : items) {
    if (item.value.empty() ||
        item.value.numElements() != numElements(item.layout.localShape()))
      return corrupt(llvm::formatv("checkpoint save: '{0}' holds {1} "
                                   "elements, its layout {2}",
                                   item.key, item.value.numElements(),
                                   numElements(item.layout.localShape()))
                         .str());
    if (safetensorsDType(item.value.dtype()).empty())
      return corrupt("checkpoint save: '" + item.key +
                     "' has a dtype safetensors cannot hold");
    std::string name = item.key + "@" + std::to_string(chunkId(item.layout));
    if (names.insert(name).second)
      entries.push_back({name, &item});
  }
  llvm::sort(entries,
             [](const Entry &a, const Entry &b) { return a.name < b.name; });

  std::vector<SafetensorsSpec> specs;
  for (const Entry &e : entries)
    specs.push_back({e.name, e.item->value.dtype(),
                     llvm::SmallVector<int64_t, 6>(e.item->value.shape())});
  std::string file = rankFileName(rank_);
  SafetensorsWriter writer;
  if (llvm::Error err = writer.begin(join(dir, file), specs,
                                     {{"format", "pt"},
                                      {"dtc.step", std::to_string(step)},
                                      {"dtc.rank", std::to_string(rank_)}}))
    return err;

  uint64_t block = options_.hashBlockBytes;
  uint64_t total = 0, written = 0;
  for (const Entry &e : entries)
    total += e.item->value.bytes();
  llvm::json::Object tensors;
  for (auto [i, e] : llvm::enumerate(entries)) {
    const SaveItem &item = *e.item;
    auto *bytes = static_cast<const uint8_t *>(item.value.data());
    uint64_t size = item.value.bytes();
    if (llvm::Error err = writer.write(bytes, size))
      return err;
    written += size;
    if (step == options_.faultKillStep && written * 2 >= total)
      ::raise(SIGKILL);
    llvm::json::Array blocks;
    for (uint64_t at = 0; at < size; at += block)
      blocks.push_back(sha256Hex(
          llvm::ArrayRef<uint8_t>(bytes + at, std::min(block, size - at))));
    llvm::json::Object chunk = item.layout.chunkJson();
    chunk["file"] = file;
    chunk["name"] = e.name;
    chunk["offset"] = static_cast<int64_t>(writer.offsets()[i]);
    chunk["bytes"] = static_cast<int64_t>(size);
    chunk["sha256"] = sha256Hex(llvm::ArrayRef<uint8_t>(bytes, size));
    chunk["block_sha256"] = std::move(blocks);
    llvm::json::Value &slot = tensors[item.key];
    if (slot.kind() == llvm::json::Value::Null)
      slot = llvm::json::Object{
          {"shape", llvm::json::Array(item.layout.globalShape())},
          {"dtype", safetensorsDType(item.value.dtype())},
          {"role", item.role},
          {"parameter", item.parameter},
          {"chunks", llvm::json::Array()}};
    if (!item.aliases.empty())
      (*slot.getAsObject())["aliases"] = llvm::json::Array(item.aliases);
    slot.getAsObject()->getArray("chunks")->push_back(std::move(chunk));
  }
  if (llvm::Error err = writer.commit())
    return err;
  // The snapshot is on disk: release it before waiting on the others.
  items.clear();

  llvm::json::Object manifest{{"schema", kManifestSchema},
                              {"step", step},
                              {"rank", rank_},
                              {"world_size", worldSize_},
                              {"save_id", options_.saveId},
                              {"hash_block_bytes", static_cast<int64_t>(block)},
                              {"tensors", std::move(tensors)}};
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::json::Value(std::move(manifest)) << "\n";
  os.flush();
  if (llvm::Error err = writeFileAtomic(join(dir, manifestName(rank_)), text))
    return err;
  if (rank_ != 0)
    return llvm::Error::success();
  return commit(step, dir, std::move(meta));
}

llvm::Error CheckpointWriter::commit(int64_t step, const std::string &dir,
                                     llvm::json::Object meta) {
  // Wait for every rank's manifest: the only coordination is the directory.
  std::vector<std::optional<llvm::json::Object>> manifests(worldSize_);
  auto deadline = std::chrono::steady_clock::now() + options_.commitTimeout;
  for (;;) {
    bool all = true;
    for (int r = 0; r < worldSize_; ++r) {
      if (manifests[r])
        continue;
      std::string file = join(dir, manifestName(r));
      if (!fs::exists(file)) {
        all = false;
        continue;
      }
      auto json = readJson(file);
      // Its rank may be removing a stale manifest of its own right now.
      if (!json && !fs::exists(file)) {
        llvm::consumeError(json.takeError());
        all = false;
        continue;
      }
      if (!json)
        return json.takeError();
      llvm::json::Object *object = json->getAsObject();
      if (!object || object->getString("schema") != kManifestSchema ||
          object->getInteger("step") != step || object->getInteger("rank") != r)
        return corrupt(file + ": not a manifest of rank " + llvm::Twine(r) +
                       " for step " + llvm::Twine(step));
      // Another run's manifest: wait for this run's to replace it.
      if (object->getString("save_id").value_or("") != options_.saveId) {
        all = false;
        continue;
      }
      if (object->getInteger("hash_block_bytes") !=
          static_cast<int64_t>(options_.hashBlockBytes))
        return corrupt(file + ": hash block size differs from rank 0's");
      manifests[r] = std::move(*object);
    }
    if (all)
      break;
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string missing;
      for (int r = 0; r < worldSize_; ++r)
        if (!manifests[r])
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      // The work failed (a rank died mid-save), the input is fine.
      return ioError(llvm::formatv("{0}: rank(s) {1} wrote no manifest "
                                   "within {2} ms; step {3} is not "
                                   "committed (a rank failed mid-save?)",
                                   dir, missing, options_.commitTimeout.count(),
                                   step)
                         .str());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  // Merge: each chunk once (the lowest rank's), every rank agreeing on the
  // tensor's shape and dtype.
  llvm::json::Object tensors;
  std::map<std::string, std::set<int64_t>> ids;
  for (int r = 0; r < worldSize_; ++r) {
    llvm::json::Object *rankTensors = manifests[r]->getObject("tensors");
    if (!rankTensors)
      return corrupt(join(dir, manifestName(r)) + ": no tensors");
    for (auto &[keyRef, value] : *rankTensors) {
      std::string key = keyRef.str();
      llvm::json::Object *entry = value.getAsObject();
      llvm::json::Array *chunks = entry ? entry->getArray("chunks") : nullptr;
      if (!chunks || !entry->getArray("shape"))
        return corrupt(join(dir, manifestName(r)) + ": tensor '" + key +
                       "' has no shape or chunks");
      llvm::json::Value &slot = tensors[key];
      if (slot.kind() == llvm::json::Value::Null) {
        llvm::json::Object head = *entry;
        head["chunks"] = llvm::json::Array();
        slot = std::move(head);
      }
      llvm::json::Object &merged = *slot.getAsObject();
      if (merged.get("shape") && *merged.get("shape") != *entry->get("shape"))
        return corrupt(llvm::formatv("checkpoint commit: '{0}' has different "
                                     "shapes on rank 0 and rank {1}",
                                     key, r)
                           .str());
      if (merged.getString("dtype") != entry->getString("dtype"))
        return corrupt(llvm::formatv("checkpoint commit: '{0}' has different "
                                     "dtypes on two ranks (rank {1})",
                                     key, r)
                           .str());
      llvm::SmallVector<int64_t, 6> shape;
      if (const llvm::json::Array *s = entry->getArray("shape"))
        for (const llvm::json::Value &d : *s)
          shape.push_back(d.getAsInteger().value_or(-1));
      for (llvm::json::Value &chunk : *chunks) {
        llvm::json::Object *c = chunk.getAsObject();
        if (!c)
          return corrupt(join(dir, manifestName(r)) + ": bad chunk");
        auto layout = ShardLayout::fromChunkJson(shape, *c);
        if (!layout)
          return corrupt(join(dir, manifestName(r)) + ": '" + key +
                         "': " + llvm::toString(layout.takeError()));
        // Keyed by layout family too: different cuts never share an id.
        std::string family;
        for (int64_t k : familyKey(*layout))
          family += std::to_string(k) + ",";
        if (!ids[key + "\n" + family].insert(chunkId(*layout)).second)
          continue;
        merged.getArray("chunks")->push_back(std::move(chunk));
      }
    }
  }
  llvm::json::Object index{
      {"schema", kSchema},
      {"step", step},
      {"world_size", worldSize_},
      {"mesh", mesh_},
      {"meta", std::move(meta)},
      {"hash_block_bytes", static_cast<int64_t>(options_.hashBlockBytes)},
      {"tensors", std::move(tensors)}};
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("{0:1}", llvm::json::Value(std::move(index))) << "\n";
  os.flush();
  if (llvm::Error err = writeFileAtomic(join(dir, "index.json"), text))
    return err;
  if (llvm::Error err = writeFileAtomic(join(dir, "COMMITTED"),
                                        "step " + std::to_string(step) + "\n"))
    return err;
  return writeFileAtomic(join(root_, "latest"), stepDirName(step) + "\n");
}

// --- Reading ----------------------------------------------------------------

uint64_t CheckpointTensor::bytes() const {
  uint64_t total = 0;
  for (const CheckpointChunk &c : chunks)
    total += c.bytes;
  return total;
}

bool isCheckpointRoot(llvm::StringRef p) {
  if (fs::exists(join(p, "latest")))
    return true;
  if (fs::exists(join(p, "index.json")) || fs::exists(join(p, "COMMITTED")) ||
      path::filename(p).starts_with("step-"))
    return false;
  std::error_code ec;
  for (fs::directory_iterator it(p, ec), end; !ec && it != end;
       it.increment(ec))
    if (path::filename(it->path()).starts_with("step-"))
      return true;
  return false;
}

llvm::Expected<std::vector<StepEntry>> listSteps(llvm::StringRef root) {
  if (!fs::is_directory(root))
    return corrupt(root + ": no such checkpoint directory");
  std::vector<StepEntry> steps;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end;
       it.increment(ec)) {
    llvm::StringRef name = path::filename(it->path());
    int64_t step;
    if (!name.starts_with("step-") ||
        name.drop_front(5).getAsInteger(10, step) ||
        !fs::is_directory(it->path()))
      continue;
    steps.push_back({name.str(), it->path(), step,
                     fs::exists(join(it->path(), "COMMITTED"))});
  }
  if (ec)
    return ioError(root + ": cannot list: " + ec.message());
  llvm::sort(steps, [](const StepEntry &a, const StepEntry &b) {
    return a.step < b.step;
  });
  return steps;
}

llvm::Expected<std::string> latestStep(llvm::StringRef root) {
  std::string file = join(root, "latest");
  auto buffer = llvm::MemoryBuffer::getFile(file);
  if (!buffer) {
    if (buffer.getError() != std::errc::no_such_file_or_directory)
      return ioError(file + ": cannot read: " + buffer.getError().message());
    // `latest` is written after COMMITTED: a save that failed in between
    // (no space left for `latest.tmp`, a crash) leaves a committed step and
    // no `latest`. That step is a checkpoint, so the newest committed step
    // stands in, as `dtc run --resume` has it (test/cli/ckpt-disk-full.test).
    auto steps = listSteps(root);
    if (!steps)
      return steps.takeError();
    for (const StepEntry &s : llvm::reverse(*steps))
      if (s.committed)
        return s.path;
    return corrupt(root + ": no 'latest' file (no committed checkpoint "
                          "here); pass a step directory or another root");
  }
  llvm::StringRef name = (*buffer)->getBuffer().trim();
  if (name.empty() || name.contains('/') || !name.starts_with("step-"))
    return corrupt(file + ": does not name a step directory");
  std::string dir = join(root, name);
  if (!fs::exists(join(dir, "COMMITTED")))
    return corrupt(file + ": names " + name +
                   ", which is not committed; the checkpoint root is "
                   "damaged (point 'latest' at a committed step)");
  return dir;
}

const CheckpointTensor *Checkpoint::find(llvm::StringRef key) const {
  auto it = tensors_.find(key.str());
  return it == tensors_.end() ? nullptr : &it->second;
}

namespace {

/// An error for a damaged index.json.
llvm::Error damagedIndex(const llvm::Twine &indexFile, const llvm::Twine &why) {
  return corrupt(indexFile + ": " + why +
                 "; the checkpoint is damaged, use an earlier step");
}

/// The step directory that `p` names: `p` itself, or the latest committed
/// step of a checkpoint root; an error unless it is a committed step.
llvm::Expected<std::string> committedStepDirectory(llvm::StringRef p) {
  std::string dir = p.str();
  if (!fs::is_directory(dir))
    return corrupt(p + ": no such checkpoint directory");
  if (isCheckpointRoot(dir)) {
    auto latest = latestStep(dir);
    if (!latest)
      return latest.takeError();
    dir = *latest;
  }
  if (!fs::exists(join(dir, "COMMITTED")) &&
      !fs::exists(join(dir, "index.json")) &&
      !fs::exists(join(dir, rankFileName(0))) &&
      !fs::exists(join(dir, manifestName(0))))
    return corrupt(dir + ": not a checkpoint (no step directories, no "
                         "index.json); pass a checkpoint root or step "
                         "directory");
  if (!fs::exists(join(dir, "COMMITTED")))
    return corrupt(dir + ": not committed (interrupted save); load the "
                         "checkpoint root to use the latest committed step, "
                         "or delete this directory");
  return dir;
}

/// Reads the tensors of a step's index.json, checking each chunk against
/// the rank files it lies in.
class IndexTensorReader {
public:
  IndexTensorReader(std::string indexFile, uint64_t blockBytes)
      : indexFile(std::move(indexFile)), blockBytes(blockBytes) {}

  llvm::Error bad(const llvm::Twine &why) const {
    return damagedIndex(indexFile, why);
  }
  /// Records the size of each of the `worldSize` rank files in `dir`.
  llvm::Error statRankFiles(const std::string &dir, int worldSize);
  /// The tensor `key` that the index's `value` describes.
  llvm::Expected<CheckpointTensor> readTensor(llvm::StringRef key,
                                              const llvm::json::Value &value);
  /// Checks that no two chunks of a rank file overlap.
  llvm::Error checkOverlaps();

private:
  llvm::Error badTensor(const CheckpointTensor &t,
                        const llvm::Twine &why) const {
    return bad("tensor '" + t.key + "': " + why);
  }
  /// The chunk of tensor `t` that `c` describes.
  llvm::Expected<CheckpointChunk> readChunk(const CheckpointTensor &t,
                                            const llvm::json::Value &c);

  std::string indexFile;
  uint64_t blockBytes;
  // Rank file -> its size, and the byte ranges the index puts in it: chunks
  // must lie inside their file without overlapping, so that no read
  // allocates more than the files hold, whatever sizes the index claims.
  std::map<std::string, uint64_t> files;
  std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> ranges;
};

llvm::Error IndexTensorReader::statRankFiles(const std::string &dir,
                                             int worldSize) {
  for (int r = 0; r < worldSize; ++r) {
    std::string file = rankFileName(r);
    uint64_t size = 0;
    if (std::error_code ec = fs::file_size(join(dir, file), size)) {
      if (ec != std::errc::no_such_file_or_directory)
        return ioError(join(dir, file) + ": cannot stat: " + ec.message());
      return corrupt(join(dir, file) + ": missing (" + llvm::Twine(worldSize) +
                     " ranks saved); the checkpoint is incomplete, use an "
                     "earlier step");
    }
    files[file] = size;
  }
  return llvm::Error::success();
}

llvm::Expected<CheckpointTensor>
IndexTensorReader::readTensor(llvm::StringRef key,
                              const llvm::json::Value &value) {
  CheckpointTensor t;
  t.key = key.str();
  const llvm::json::Object *entry = value.getAsObject();
  if (!entry)
    return badTensor(t, "not an object");
  const llvm::json::Array *shape = entry->getArray("shape");
  auto dtype = entry->getString("dtype");
  const llvm::json::Array *chunks = entry->getArray("chunks");
  if (!shape || !dtype || !chunks)
    return badTensor(t, "no shape, dtype or chunks");
  // Element and byte counts must not overflow: a wrapped product could
  // match the chunks' sizes while the shape claims far more.
  int64_t elements = 1, tensorBytes;
  for (const llvm::json::Value &d : *shape) {
    auto dim = d.getAsInteger();
    if (!dim || *dim < 0 || llvm::MulOverflow(elements, *dim, elements))
      return badTensor(t, "invalid shape");
    t.shape.push_back(*dim);
  }
  t.dtype = parseSafetensorsDType(*dtype);
  if (t.dtype == DType::DTYPE_UNSPECIFIED)
    return badTensor(t, "unknown dtype '" + *dtype + "'");
  if (llvm::MulOverflow(elements, static_cast<int64_t>(dtypeSize(t.dtype)),
                        tensorBytes))
    return badTensor(t, "invalid shape");
  t.role = entry->getString("role").value_or("").str();
  t.parameter = entry->getString("parameter").value_or("").str();
  if (const llvm::json::Array *aliases = entry->getArray("aliases"))
    for (const llvm::json::Value &alias : *aliases) {
      std::optional<llvm::StringRef> name = alias.getAsString();
      if (!name || name->empty())
        return badTensor(t, "an alias is not a name");
      t.aliases.push_back(name->str());
    }
  for (const llvm::json::Value &c : *chunks) {
    llvm::Expected<CheckpointChunk> k = readChunk(t, c);
    if (!k)
      return k.takeError();
    t.chunks.push_back(std::move(*k));
  }
  return t;
}

llvm::Expected<CheckpointChunk>
IndexTensorReader::readChunk(const CheckpointTensor &t,
                             const llvm::json::Value &c) {
  const llvm::json::Object *chunk = c.getAsObject();
  if (!chunk)
    return badTensor(t, "a chunk is not an object");
  CheckpointChunk k;
  auto layout = ShardLayout::fromChunkJson(t.shape, *chunk);
  if (!layout)
    return badTensor(t, llvm::toString(layout.takeError()));
  k.layout = std::move(*layout);
  auto file = chunk->getString("file");
  auto name = chunk->getString("name");
  auto offset = chunk->getInteger("offset");
  auto bytes = chunk->getInteger("bytes");
  auto sha = chunk->getString("sha256");
  const llvm::json::Array *blocks = chunk->getArray("block_sha256");
  if (!file || !name || !offset || *offset < 0 || !bytes || *bytes < 0 ||
      !sha || !blocks)
    return badTensor(t, "a chunk lacks file, name, offset, bytes, sha256 "
                        "or block_sha256");
  auto fileSize = files.find(file->str());
  if (fileSize == files.end())
    return badTensor(t, "chunk in unknown file '" + *file + "'");
  if (static_cast<uint64_t>(*offset) > fileSize->second ||
      static_cast<uint64_t>(*bytes) > fileSize->second - *offset)
    return badTensor(t, "chunk '" + *name + "' at bytes [" +
                            llvm::Twine(*offset) + ", +" + llvm::Twine(*bytes) +
                            ") lies past the end of " + *file + " (" +
                            llvm::Twine(fileSize->second) + " bytes)");
  ranges[file->str()].push_back(
      {static_cast<uint64_t>(*offset), static_cast<uint64_t>(*bytes)});
  k.file = file->str();
  k.name = name->str();
  k.offset = *offset;
  k.bytes = *bytes;
  k.sha256 = sha->str();
  uint64_t expected = numElements(k.layout.localShape()) * dtypeSize(t.dtype);
  if (k.bytes != expected)
    return badTensor(t, "chunk '" + k.name + "' has " + llvm::Twine(k.bytes) +
                            " bytes, its layout " + llvm::Twine(expected));
  for (const llvm::json::Value &b : *blocks) {
    auto h = b.getAsString();
    if (!h)
      return badTensor(t, "a block hash is not a string");
    k.blockSha256.push_back(h->str());
  }
  if (k.blockSha256.size() != (k.bytes + blockBytes - 1) / blockBytes)
    return badTensor(
        t, "chunk '" + k.name + "' has " + llvm::Twine(k.blockSha256.size()) +
               " block hashes for " + llvm::Twine(k.bytes) + " bytes");
  return k;
}

llvm::Error IndexTensorReader::checkOverlaps() {
  for (auto &[file, list] : ranges) {
    llvm::sort(list);
    for (size_t i = 1; i < list.size(); ++i)
      if (list[i - 1].first + list[i - 1].second > list[i].first)
        return bad(file + ": chunks at bytes " +
                   llvm::Twine(list[i - 1].first) + " and " +
                   llvm::Twine(list[i].first) + " overlap");
  }
  return llvm::Error::success();
}

} // namespace

llvm::Expected<Checkpoint> Checkpoint::open(llvm::StringRef p) {
  llvm::Expected<std::string> dir = committedStepDirectory(p);
  if (!dir)
    return dir.takeError();
  std::string indexFile = join(*dir, "index.json");
  auto json = readJson(indexFile);
  if (!json)
    return json.takeError();
  auto bad = [&](const llvm::Twine &why) {
    return damagedIndex(indexFile, why);
  };
  const llvm::json::Object *index = json->getAsObject();
  if (!index)
    return bad("not a JSON object");
  if (index->getString("schema") != kSchema)
    return bad("schema is not \"" + kSchema + "\"");
  Checkpoint ckpt;
  ckpt.dir_ = *dir;
  auto step = index->getInteger("step");
  auto world = index->getInteger("world_size");
  auto block = index->getInteger("hash_block_bytes");
  auto mesh = index->getString("mesh");
  const llvm::json::Object *tensors = index->getObject("tensors");
  if (!step || !world || *world < 1 ||
      *world > std::numeric_limits<int>::max() || !block || *block < 1 ||
      !mesh || !tensors)
    return bad("missing or invalid step, world_size, mesh, hash_block_bytes "
               "or tensors");
  ckpt.step_ = *step;
  ckpt.worldSize_ = static_cast<int>(*world);
  ckpt.blockBytes_ = *block;
  ckpt.mesh_ = mesh->str();
  if (const llvm::json::Object *meta = index->getObject("meta"))
    ckpt.meta_ = *meta;

  IndexTensorReader reader(indexFile, ckpt.blockBytes_);
  if (llvm::Error e = reader.statRankFiles(*dir, ckpt.worldSize_))
    return std::move(e);
  for (const auto &[keyRef, value] : *tensors) {
    llvm::Expected<CheckpointTensor> t = reader.readTensor(keyRef, value);
    if (!t)
      return t.takeError();
    ckpt.tensors_.emplace(t->key, std::move(*t));
  }
  if (llvm::Error e = reader.checkOverlaps())
    return std::move(e);
  return ckpt;
}

llvm::Error Checkpoint::read(llvm::StringRef key, const ShardLayout &target,
                             const TensorRef &out) const {
  const CheckpointTensor *t = find(key);
  if (!t)
    return corrupt(dir_ + ": no tensor '" + key +
                   "' in the checkpoint (saved under another model?)");
  if (target.globalShape() != llvm::ArrayRef<int64_t>(t->shape))
    return corrupt(key + ": the target's shape " +
                   shapeText(target.globalShape()) +
                   " differs from the "
                   "saved " +
                   shapeText(t->shape));
  if (out.dtype != t->dtype)
    return corrupt(key + ": saved as " + safetensorsDType(t->dtype) +
                   ", the target is " + dtypeName(out.dtype));
  if (out.numElements() != numElements(target.localShape()))
    return corrupt(key + ": the output holds " +
                   llvm::Twine(out.numElements()) + " elements, the target " +
                   "layout " + llvm::Twine(numElements(target.localShape())));
  if (out.numElements() == 0)
    return llvm::Error::success();

  std::vector<std::vector<Segment>> segments;
  if (llvm::Error err = planRead(*t, key, target, segments))
    return err;

  FileSet files(dir_);
  auto *dstBase = static_cast<uint8_t *>(out.data);
  for (size_t c = 0; c < segments.size(); ++c) {
    // Captured by the reader callback below (a structured binding could
    // not be before C++20).
    std::vector<Segment> &list = segments[c];
    if (list.empty())
      continue;
    llvm::sort(
        list, [](const Segment &a, const Segment &b) { return a.src < b.src; });
    std::vector<uint64_t> blocks;
    for (const Segment &s : list)
      for (uint64_t b = s.src / blockBytes_,
                    e = (s.src + s.bytes - 1) / blockBytes_;
           b <= e; ++b)
        if (blocks.empty() || blocks.back() < b)
          blocks.push_back(b);
    size_t next = 0;
    llvm::Error err = readBlocks(
        *t, t->chunks[c], blockBytes_, blocks, files,
        [&](uint64_t begin, llvm::ArrayRef<uint8_t> bytes) {
          uint64_t end = begin + bytes.size();
          for (size_t k = next; k < list.size() && list[k].src < end; ++k) {
            const Segment &s = list[k];
            uint64_t from = std::max(s.src, begin);
            uint64_t to = std::min(s.src + s.bytes, end);
            if (from < to)
              std::memcpy(dstBase + s.dst + (from - s.src),
                          bytes.data() + (from - begin), to - from);
            if (s.src + s.bytes <= end)
              next = k + 1;
          }
        });
    if (err)
      return err;
  }
  return llvm::Error::success();
}

llvm::Expected<Tensor> Checkpoint::readWhole(llvm::StringRef key) const {
  const CheckpointTensor *t = find(key);
  if (!t)
    return corrupt(dir_ + ": no tensor '" + key + "' in the checkpoint");
  auto whole = ShardLayout::fromParts(t->shape, {});
  if (!whole)
    return whole.takeError();
  // Chunks holding fewer bytes than the tensor cannot cover it: name the
  // missing element without allocating the size the index claims.
  if (t->bytes() < numElements(t->shape) * dtypeSize(t->dtype)) {
    std::vector<std::vector<Segment>> segments;
    if (llvm::Error err = planRead(*t, key, *whole, segments))
      return std::move(err);
    return corrupt(key + ": its chunks do not cover it");
  }
  Tensor out(t->dtype, t->shape);
  if (llvm::Error err = read(key, *whole, out.ref()))
    return std::move(err);
  return out;
}

llvm::Error Checkpoint::checkChunkLocations() const {
  // Every rank file is a valid safetensors file whose tensors the index's
  // chunks are.
  std::map<std::string, SafetensorsFile> headers;
  for (int r = 0; r < worldSize_; ++r) {
    auto file = SafetensorsFile::open(join(dir_, rankFileName(r)));
    if (!file)
      return file.takeError();
    headers.emplace(rankFileName(r), std::move(*file));
  }
  for (const auto &[key, t] : tensors_)
    for (const CheckpointChunk &c : t.chunks) {
      const SafetensorsEntry *e = headers.at(c.file).find(c.name);
      if (!e || e->begin != c.offset || e->bytes() != c.bytes ||
          e->dtype != t.dtype)
        return corrupt(key + ": " + c.file + ": tensor '" + c.name +
                       "' is not where index.json says (bytes [" +
                       llvm::Twine(c.offset) + ", " +
                       llvm::Twine(c.offset + c.bytes) + "))");
    }
  return llvm::Error::success();
}

llvm::Error Checkpoint::verify(VerifyStats *stats) const {
  VerifyStats local;
  if (!fs::exists(join(dir_, "COMMITTED")))
    return corrupt(dir_ + ": not committed (interrupted save)");
  if (llvm::Error err = checkChunkLocations())
    return err;
  FileSet files(dir_);
  for (const auto &[key, t] : tensors_) {
    // Coverage: a family of chunks cut the same way covers the tensor
    // exactly once when it has each chunk id once; mixed cuts are counted
    // element by element.
    std::vector<Family> families = familiesOf(t.chunks);
    int64_t elements = numElements(t.shape);
    if (families.size() == 1 && elements > 0) {
      const ShardLayout &shape = *families[0].shape;
      int64_t total = shape.flatParts();
      for (const ShardLayout::DimPart &p : shape.dimParts())
        total *= p.parts;
      if (static_cast<int64_t>(t.chunks.size()) != total ||
          static_cast<int64_t>(families[0].chunkById.size()) != total)
        return corrupt(
            llvm::formatv(
                "{0}: {1} chunks for {2} parts ({3} distinct): the "
                "chunks {4} the tensor",
                key, t.chunks.size(), total, families[0].chunkById.size(),
                families[0].chunkById.size() < t.chunks.size() ? "overlap in"
                                                               : "do not cover")
                .str());
    } else if (elements > 0) {
      // Checked before the per-element map, which the shape sizes: chunks
      // with fewer bytes than the tensor leave elements uncovered.
      if (t.bytes() < elements * dtypeSize(t.dtype))
        return corrupt(key + ": its chunks hold " + llvm::Twine(t.bytes()) +
                       " bytes of its " +
                       llvm::Twine(elements * dtypeSize(t.dtype)) +
                       "; some elements are in no chunk");
      std::vector<uint8_t> seen(elements, 0);
      for (const CheckpointChunk &c : t.chunks)
        forEachRun(c.layout, [&](int64_t, int64_t global, int64_t count) {
          for (int64_t i = 0; i < count; ++i)
            seen[global + i] = std::min<int>(seen[global + i] + 1, 2);
          return true;
        });
      for (int64_t i = 0; i < elements; ++i)
        if (seen[i] != 1)
          return corrupt(
              key + ": element " + llvm::Twine(i) +
              (seen[i] ? " is in more than one chunk" : " is in no chunk"));
    } else if (t.chunks.empty()) {
      return corrupt(key + ": no chunks");
    }
    // Hashes: every block, and the whole chunk.
    for (const CheckpointChunk &c : t.chunks) {
      std::vector<uint64_t> blocks(c.blockSha256.size());
      std::iota(blocks.begin(), blocks.end(), uint64_t(0));
      Sha256 whole;
      if (llvm::Error err =
              readBlocks(t, c, blockBytes_, blocks, files,
                         [&](uint64_t, llvm::ArrayRef<uint8_t> bytes) {
                           whole.update(bytes);
                         }))
        return err;
      if (whole.finalHex() != c.sha256)
        return corrupt(key + ": " + c.file + ": chunk '" + c.name +
                       "' does not match its sha256");
      local.hashes += blocks.size() + 1;
      local.bytes += c.bytes;
      ++local.chunks;
    }
    ++local.tensors;
  }
  if (stats)
    *stats = local;
  return llvm::Error::success();
}

} // namespace dtc::runtime
