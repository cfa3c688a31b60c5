//===- Ckpt.cpp - dtc ckpt inspect | verify | consolidate -----------------===//

#include "compiler/ckpt/Ckpt.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/support/Error.h"
#include "runtime/support/OutputDir.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"

#include <system_error>

namespace rt = dtc::runtime;

namespace dtc {

llvm::Error toDtcError(llvm::Error err) {
  if (!err)
    return llvm::Error::success();
  std::string message;
  bool io = false;
  llvm::handleAllErrors(std::move(err), [&](const llvm::ErrorInfoBase &e) {
    if (!message.empty())
      message += "; ";
    message += e.message();
    io = io ||
         e.convertToErrorCode() == std::make_error_code(std::errc::io_error);
  });
  if (io)
    return failure("{0}", message);
  return badInput("{0}", message);
}

namespace {

std::string humanBytes(uint64_t bytes) {
  if (bytes < 1024)
    return std::to_string(bytes) + " B";
  const char *units[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = bytes;
  int unit = -1;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  return llvm::formatv("{0:F1} {1}", value, units[unit]).str();
}

std::string shapeText(llvm::ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (auto [i, d] : llvm::enumerate(shape))
    s += (i ? "x" : "") + std::to_string(d);
  return s + "]";
}

/// A JSON value on one line: scalars as they are, containers summarized.
std::string brief(const llvm::json::Value &v) {
  if (auto s = v.getAsString())
    return s->str();
  if (const llvm::json::Object *o = v.getAsObject())
    return "{" + std::to_string(o->size()) + " keys}";
  if (const llvm::json::Array *a = v.getAsArray())
    return "[" + std::to_string(a->size()) + " items]";
  std::string text;
  llvm::raw_string_ostream os(text);
  os << v;
  return text;
}

std::vector<std::string> sortedKeys(const llvm::json::Object &o) {
  std::vector<std::string> keys;
  for (const auto &kv : o)
    keys.push_back(kv.first.str());
  llvm::sort(keys);
  return keys;
}

void printCheckpoint(const rt::Checkpoint &ckpt, llvm::raw_ostream &out) {
  out << llvm::formatv("{0}: step {1}, {2} rank{3}, mesh {4}\n",
                       ckpt.directory(), ckpt.step(), ckpt.worldSize(),
                       ckpt.worldSize() == 1 ? "" : "s",
                       ckpt.mesh().empty() ? "(one rank)" : ckpt.mesh());
  const llvm::json::Object &meta = ckpt.meta();
  // The plan's degrees first (whatever scalars the saver recorded).
  if (const llvm::json::Object *plan = meta.getObject("plan")) {
    out << "  plan:";
    for (const std::string &k : sortedKeys(*plan)) {
      const llvm::json::Value &v = *plan->get(k);
      if (v.kind() != llvm::json::Value::Object &&
          v.kind() != llvm::json::Value::Array)
        out << " " << k << "=" << brief(v);
    }
    out << "\n";
  } else if (const llvm::json::Value *plan = meta.get("plan")) {
    out << "  plan: " << brief(*plan) << "\n";
  }
  // Where `dtc run` was in its data (docs/checkpoints.md).
  if (const llvm::json::Object *at = meta.getObject("position")) {
    auto number = [&](llvm::StringRef k) {
      return at->getInteger(k).value_or(0);
    };
    out << llvm::formatv("  position: step {0}, {1} samples seen (global "
                         "batch {2}), data seed {3}\n",
                         number("step"), number("samples"),
                         number("global_batch"),
                         at->getString("seed").value_or("?"));
  }
  std::vector<std::string> rest;
  for (const std::string &k : sortedKeys(meta))
    if (k != "plan" && k != "position")
      rest.push_back(k + "=" + brief(*meta.get(k)));
  if (!rest.empty())
    out << "  meta: " << llvm::join(rest, ", ") << "\n";

  uint64_t bytes = 0;
  size_t chunks = 0, params = 0, keyWidth = 3, shapeWidth = 5;
  for (const auto &[key, t] : ckpt.tensors()) {
    bytes += t.bytes();
    chunks += t.chunks.size();
    params += t.role == "parameter";
    keyWidth = std::max(keyWidth, key.size());
    shapeWidth = std::max(shapeWidth, shapeText(t.shape).size());
  }
  out << llvm::formatv("  tensors: {0} ({1} parameters), {2} chunks, {3}\n",
                       ckpt.tensors().size(), params, chunks,
                       humanBytes(bytes));
  out << "  " << llvm::left_justify("key", keyWidth) << "  "
      << llvm::left_justify("shape", shapeWidth) << "  dtype  chunks  bytes\n";
  for (const auto &[key, t] : ckpt.tensors())
    out << "  " << llvm::left_justify(key, keyWidth) << "  "
        << llvm::left_justify(shapeText(t.shape), shapeWidth) << "  "
        << llvm::left_justify(rt::safetensorsDType(t.dtype), 5) << "  "
        << llvm::right_justify(std::to_string(t.chunks.size()), 6) << "  "
        << t.bytes() << "\n";
}

} // namespace

/// `dir` without trailing slashes (step names come from its last part).
static llvm::StringRef trimmed(llvm::StringRef dir) {
  llvm::StringRef t = dir.rtrim('/');
  return t.empty() ? dir : t;
}

llvm::Error inspectCheckpoint(llvm::StringRef dir, llvm::raw_ostream &out) {
  dir = trimmed(dir);
  if (rt::isCheckpointRoot(dir)) {
    auto steps = rt::listSteps(dir);
    if (!steps)
      return toDtcError(steps.takeError());
    auto latest = rt::latestStep(dir);
    std::string latestName;
    if (latest)
      latestName = llvm::sys::path::filename(*latest).str();
    else
      llvm::consumeError(latest.takeError());
    out << llvm::formatv("{0}: {1} step director{2}\n", dir, steps->size(),
                         steps->size() == 1 ? "y" : "ies");
    for (const rt::StepEntry &s : *steps)
      out << "  " << s.name << "  "
          << (s.committed ? "committed" : "not committed (interrupted save)")
          << (s.name == latestName ? " (latest)" : "") << "\n";
  }
  auto ckpt = rt::Checkpoint::open(dir);
  if (!ckpt)
    return toDtcError(ckpt.takeError());
  printCheckpoint(*ckpt, out);
  return llvm::Error::success();
}

llvm::Error verifyCheckpoint(llvm::StringRef dir, llvm::raw_ostream &out) {
  dir = trimmed(dir);
  // No run may write the checkpoint while it is verified.
  auto lock = DirectoryLock::acquire(
      rt::isCheckpointRoot(dir) ? dir : llvm::sys::path::parent_path(dir),
      "ckpt verify", /*exclusive=*/false);
  if (!lock)
    return lock.takeError();
  auto verifyOne = [&](llvm::StringRef path, llvm::StringRef name,
                       rt::VerifyStats &total) -> llvm::Error {
    auto ckpt = rt::Checkpoint::open(path);
    if (!ckpt)
      return ckpt.takeError();
    rt::VerifyStats stats;
    if (llvm::Error err = ckpt->verify(&stats))
      return err;
    out << llvm::formatv("{0}: ok ({1} tensors, {2} chunks, {3}, {4} hashes)\n",
                         name, stats.tensors, stats.chunks,
                         humanBytes(stats.bytes), stats.hashes);
    total.tensors += stats.tensors;
    total.chunks += stats.chunks;
    total.bytes += stats.bytes;
    total.hashes += stats.hashes;
    return llvm::Error::success();
  };
  rt::VerifyStats total;
  if (!rt::isCheckpointRoot(dir)) {
    if (llvm::Error err = verifyOne(dir, llvm::sys::path::filename(dir), total))
      return toDtcError(std::move(err));
    return llvm::Error::success();
  }
  auto steps = rt::listSteps(dir);
  if (!steps)
    return toDtcError(steps.takeError());
  int committed = 0, partial = 0;
  for (const rt::StepEntry &s : *steps) {
    if (!s.committed) {
      out << s.name << ": not committed (interrupted save); ignored\n";
      ++partial;
      continue;
    }
    if (llvm::Error err = verifyOne(s.path, s.name, total)) {
      // Which step is damaged matters on a root of many.
      return toDtcError(
          llvm::handleErrors(std::move(err), [&](const llvm::ErrorInfoBase &e) {
            std::string message = e.message();
            if (message.find(s.name) == std::string::npos)
              message = s.name + ": " + message;
            return llvm::createStringError(e.convertToErrorCode(), message);
          }));
    }
    ++committed;
  }
  auto latest = rt::latestStep(dir);
  if (!latest)
    return toDtcError(latest.takeError());
  out << llvm::formatv(
      "verified {0} committed step{1} (latest {2}){3}: {4} "
      "tensors, {5}, {6} hashes checked\n",
      committed, committed == 1 ? "" : "s", llvm::sys::path::filename(*latest),
      partial ? llvm::formatv(", {0} partial ignored", partial).str()
              : std::string(),
      total.tensors, humanBytes(total.bytes), total.hashes);
  return llvm::Error::success();
}

llvm::Error consolidateCheckpoint(llvm::StringRef dir, llvm::StringRef output,
                                  bool force, llvm::raw_ostream &out) {
  dir = trimmed(dir);
  // Before any work: the output is a new file, or --force replaces one.
  llvm::sys::fs::file_status status;
  if (!llvm::sys::fs::status(output, status, /*follow=*/false)) {
    if (status.type() == llvm::sys::fs::file_type::directory_file)
      return badInput("-o {0}: is a directory; name the .safetensors file to "
                      "write",
                      output);
    if (status.type() == llvm::sys::fs::file_type::symlink_file)
      return badInput("-o {0}: is a symbolic link; name a new file", output);
    if (!force)
      return badInput("-o {0}: exists; pass --force to replace it", output);
  }
  // No run may write the checkpoint while it is read.
  auto lock = DirectoryLock::acquire(
      rt::isCheckpointRoot(dir) ? dir : llvm::sys::path::parent_path(dir),
      "ckpt consolidate", /*exclusive=*/false);
  if (!lock)
    return lock.takeError();
  auto ckpt = rt::Checkpoint::open(dir);
  if (!ckpt)
    return toDtcError(ckpt.takeError());
  // The reads below check hashes and coverage; this, that each chunk is the
  // rank file's own tensor.
  if (llvm::Error err = ckpt->checkChunkLocations())
    return toDtcError(std::move(err));
  std::vector<const rt::CheckpointTensor *> params;
  std::vector<rt::SafetensorsSpec> specs;
  // The model's state_dict: its parameters and its buffers, each under
  // its name and its tied aliases (load_state_dict(strict=True) wants all).
  std::vector<const rt::CheckpointTensor *> writes;
  llvm::StringSet<> names;
  for (const auto &[key, t] : ckpt->tensors()) {
    if (t.role != "parameter" && t.role != "buffer")
      continue;
    params.push_back(&t);
    std::vector<std::string> all = {t.parameter.empty() ? key : t.parameter};
    llvm::append_range(all, t.aliases);
    for (const std::string &name : all) {
      if (!names.insert(name).second)
        return badInput("{0}: '{1}' names two tensors of the checkpoint",
                        ckpt->directory(), name);
      specs.push_back({name, t.dtype, t.shape});
      writes.push_back(&t);
    }
  }
  if (params.empty())
    return badInput("{0}: no parameters in the checkpoint", ckpt->directory());
  // One tensor in memory at a time; the file appears only when complete.
  rt::SafetensorsWriter writer;
  uint64_t bytes = 0;
  if (llvm::Error err = writer.begin(
          output, specs,
          {{"format", "pt"}, {"dtc.step", std::to_string(ckpt->step())}}))
    return toDtcError(std::move(err));
  for (const rt::CheckpointTensor *t : writes) {
    auto whole = ckpt->readWhole(t->key);
    if (!whole)
      return toDtcError(whole.takeError());
    if (llvm::Error err = writer.write(whole->data(), whole->bytes()))
      return toDtcError(std::move(err));
    bytes += whole->bytes();
  }
  if (llvm::Error err = writer.commit())
    return toDtcError(std::move(err));
  size_t buffers = llvm::count_if(params, [](const rt::CheckpointTensor *t) {
    return t->role == "buffer";
  });
  out << llvm::formatv("wrote {0}: {1} parameters{2}, {3} (step {4})\n", output,
                       params.size() - buffers,
                       buffers ? llvm::formatv(" and {0} buffer{1}", buffers,
                                               buffers == 1 ? "" : "s")
                                     .str()
                               : std::string(),
                       humanBytes(bytes), ckpt->step());
  return llvm::Error::success();
}

} // namespace dtc
