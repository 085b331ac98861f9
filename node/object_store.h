// The node's object store on disk: a directory in /dev/shm that the Python processes of this
// machine write (python/phalanx/_objects.py holds the file format), with one directory per
// owner process, named "<pid>-<start time>", and one file per object. It holds up to its
// capacity (`phalanx start --object-store-memory`); a value that does not fit goes to the
// spill directory on disk instead, in the same layout. The two are named in the store's
// files ".capacity" and ".spill". The node manager creates them, removes the directories of
// owners that died (their objects die with them, as in Ray), reports the usage (heartbeats,
// /metrics), and serves the files to readers on other nodes (NodeManagerService.ReadObject).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/proto/common.pb.h"

namespace phalanx::node {

// The store's capacity when none is given: this fraction of the machine's memory (Ray's
// default), and never more than /dev/shm has free at the node's start.
inline constexpr double kDefaultObjectStoreFraction = 0.3;

// A store with no ".node" file is left alone this long after its last change: it may be
// one that another node manager is creating.
inline constexpr absl::Duration kStaleObjectStoreAge = absl::Seconds(60);
// How often the node manager looks for the objects of owners that died.
inline constexpr absl::Duration kObjectSweepPeriod = absl::Seconds(1);
// The size of one ReadObject chunk.
inline constexpr int64_t kObjectChunkBytes = int64_t{1} << 20;

// Past this fraction of its capacity, the node manager makes room in the store: cached copies
// go first (the least recently read), then values move to the spill directory (the oldest
// first), so that new values find room in memory (Ray's object_spilling_threshold, 0.8).
inline constexpr double kObjectSpillThreshold = 0.8;

// The node's cache of other nodes' values, "<store>/.cache/<holder node>/<owner>/<object id>",
// so that a value crosses the network once per node, however many of its processes read it
// (as Ray's object manager pulls an object once per node). A reader of this machine that
// fetches one (python/phalanx/_objects.py's _fetch) takes ".<object id>.lock" (its content:
// the reader, "<pid>-<start time>"), writes ".<object id>.<reader>" and renames it; other
// readers wait for it. The node manager drops the copies whose holder no longer holds the
// value (it was freed, or its owner or node died), and the least recently read ones first
// when the store is past kObjectSpillThreshold.
inline constexpr char kObjectCacheDir[] = ".cache";
// How long the node manager waits for a holder's answer about its cached values (an
// unanswered holder's copies are kept until the next sweep).
inline constexpr absl::Duration kObjectCacheCheckTimeout = absl::Seconds(2);

// The name prefix of a file that an owner keeps after freeing its value, to write its next
// values into (python/phalanx/_object_pool.py: pages already in memory, as Ray's plasma
// reuses its arena). Such a file is used memory of the store, not an object; the node neither
// spills nor serves it, and it goes with its owner's directory.
inline constexpr char kObjectPoolPrefix[] = ".free-";

// A copy in the node's cache.
struct CachedObject {
  std::string node;  // the node that holds the value
  std::string owner;
  std::string object_id;
  std::string path;
  int64_t bytes = 0;
  absl::Time read;  // its last read (readers touch the file's time)
};

// The store directory of node `node_id` (the same path in _objects.py's _store_root). With
// `phalanx start --object-store-dir DIR` it is a symbolic link to DIR/phalanx-objects-<node
// id> (ObjectStoreDataDir), as Ray's --plasma-directory moves the store: a tmpfs mounted with
// huge=within_size, for one, gives 2 MiB pages, so a put copies at several times the speed of
// /dev/shm's 4 KiB pages, which each fault in.
std::string ObjectStoreDir(const std::string& node_id);
std::string ObjectStoreDataDir(const std::string& root, const std::string& node_id);

// Whether `s` may name something in the store (an owner, an object, a job's snapshots): letters,
// digits, '-' and '_' only, 1 to 128 of them; never a path.
bool IsStoreName(absl::string_view s);

// Whether `owner` ("<pid>-<start time>", a directory of the store) names a process that runs:
// the pid exists and started at that time (a reused pid does not count).
bool ObjectOwnerAlive(absl::string_view owner);

// The default capacity (kDefaultObjectStoreFraction, and the free space of `root`, by
// default /dev/shm).
int64_t DefaultObjectStoreBytes(const std::string& root = "");

// Creates the store `dir` and the spill directory, and names them, the capacity and this
// process (the node manager) in the store's ".capacity", ".spill" and ".node" files. With a
// `data_dir`, `dir` is a link to it (created again if one is left).
absl::Status CreateObjectStore(const std::string& dir, const std::string& spill_dir,
                               int64_t capacity_bytes, const std::string& data_dir = "");

// Removes an (empty) store directory: the directory, or the link and the directory it names.
void RemoveObjectStoreDir(const std::string& dir);

// Removes the directories of owners that are not alive; returns how many (and their names,
// into `removed` when given).
int SweepObjectStore(const std::string& dir, std::vector<std::string>* removed = nullptr);

// Removes the stores in /dev/shm, other than `own_dir`, whose node manager is gone (its
// ".node" names a process that does not run, or the store has none and no owner is left in
// it): a node manager that was SIGKILLed could not remove its own. Returns how many.
int RemoveStaleObjectStores(const std::string& own_dir);

// The copies in store `dir`'s cache. Removes the lock and temporary files of readers that
// died, and the empty directories older than kStaleObjectStoreAge.
std::vector<CachedObject> ListObjectCache(const std::string& dir);

// Removes copies of `cache`, the least recently read first, while `used_bytes` (the store's,
// its cache included) is over `capacity_bytes`. Returns the bytes removed.
int64_t TrimObjectCache(std::vector<CachedObject> cache, int64_t used_bytes,
                        int64_t capacity_bytes);

// Moves values of store `dir` to `spill_dir` (the same layout), the oldest first, until the
// store's `used_bytes` is at most `target_bytes`. Each is copied, renamed into place, then
// unlinked from the store, so a reader finds it in one or the other (readers look in both);
// one its owner freed meanwhile leaves no copy. Returns the bytes moved.
int64_t SpillOldestObjects(const std::string& dir, const std::string& spill_dir, int64_t used_bytes,
                           int64_t target_bytes);

// Whether object `object_id` of `owner` is in one of `dirs` and its owner is alive.
bool ObjectHeld(const std::vector<std::string>& dirs, absl::string_view owner,
                absl::string_view object_id);

// What the store (its cache included) and its spill directory hold now.
rpc::ObjectStoreUsage MeasureObjectStore(const std::string& dir, const std::string& spill_dir,
                                         int64_t capacity_bytes);

// Streams object `object_id` of `owner`, from the first of `dirs` that has it, to `write` (a
// chunk, and the file's size), in chunks of kObjectChunkBytes. NOT_FOUND: not there (not written
// yet, or freed); FAILED_PRECONDITION: its owner is dead; INVALID_ARGUMENT: a name that is not one.
// `probe`: one empty chunk with the size, when it is there.
absl::Status StreamObject(const std::vector<std::string>& dirs, absl::string_view owner,
                          absl::string_view object_id, bool probe,
                          const std::function<bool(absl::string_view chunk, int64_t size)>& write);

}  // namespace phalanx::node
