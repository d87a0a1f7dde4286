// The usage table of the SQLite state file (the usage ledger: usage.hpp): a row per ledger row, in
// columns, so that a site's own SQL can read it too.

#include <sqlite3.h>

#include "poolrun/pool/json_read.hpp"
#include "poolrun/pool/store.hpp"
#include "poolrun/pool/usage_json.hpp"
#include "sqlite_steps.hpp"

namespace poolrun::pool {

using sql::refusal;
using sql::Step;
using sql::text;

namespace {

int64_t millisOf(TimePoint t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

}  // namespace

void Store::loadUsage(PoolState& state) {
  sqlite3_stmt* st = prepare(
      "SELECT id, kind, lease, job, owner, account, node, model, start_ms, end_ms, running, gpus, "
      "allocated_s, used_s, idle_s, energy_j, ended FROM usage");
  Step s(db_.get(), st);
  while (s.row()) {
    UsageRecord r;
    const int64_t id = sqlite3_column_int64(st, 0);
    try {
      r.id = static_cast<uint64_t>(id);
      const std::string kind = text(st, 1);
      auto k = usageKindOf(kind);
      if (!k) throw std::runtime_error("its kind '" + kind + "' is none of lease, day, total");
      r.kind = *k;
      r.lease = text(st, 2);
      r.job = text(st, 3);
      r.owner = text(st, 4);
      r.account = text(st, 5);
      r.node = text(st, 6);
      r.model = text(st, 7);
      for (int col : {8, 9}) {
        const int64_t ms = sqlite3_column_int64(st, col);
        if (ms < 0 || ms > json_read::kTimeMillisRange.max)
          throw std::runtime_error("its " + std::string(col == 8 ? "start" : "end") + " " +
                                   std::to_string(ms) + " ms is no time of the pool's clock (1970 to 2262)");
      }
      r.start = TimePoint(std::chrono::milliseconds(sqlite3_column_int64(st, 8)));
      r.end = TimePoint(std::chrono::milliseconds(sqlite3_column_int64(st, 9)));
      r.running = sqlite3_column_int64(st, 10) != 0;
      r.gpus = sqlite3_column_double(st, 11);
      r.allocated_s = sqlite3_column_double(st, 12);
      r.used_s = sqlite3_column_double(st, 13);
      r.idle_s = sqlite3_column_double(st, 14);
      r.energy_j = sqlite3_column_double(st, 15);
      r.ended = text(st, 16);
      if (id <= 0) throw std::runtime_error("its id is not 1 or more");
      checkUsageRecord(r);
    } catch (const std::exception& e) {
      throw refusal(file_, "usage row " + std::to_string(id) + " is broken (" + e.what() + ")");
    }
    state.loadUsage(std::move(r));
  }
  state.finishUsageLoad();
}

void Store::writeUsage(const PoolState& state, const Dirty& dirty) {
  for (uint64_t id : dirty.usage) {
    const std::optional<UsageRecord> r = state.usage().find(id);
    if (!r) {
      Step(db_.get(), prepare("DELETE FROM usage WHERE id = ?")).bind(static_cast<int64_t>(id)).run();
      continue;
    }
    Step(db_.get(), prepare("INSERT OR REPLACE INTO usage(id, kind, lease, job, owner, account, node, model, "
                            "start_ms, end_ms, running, gpus, allocated_s, used_s, idle_s, energy_j, ended) "
                            "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"))
        .bind(static_cast<int64_t>(r->id))
        .bind(toString(r->kind))
        .bind(r->lease)
        .bind(r->job)
        .bind(r->owner)
        .bind(r->account)
        .bind(r->node)
        .bind(r->model)
        .bind(millisOf(r->start))
        .bind(millisOf(r->end))
        .bind(int64_t{r->running ? 1 : 0})
        .bindReal(r->gpus)
        .bindReal(r->allocated_s)
        .bindReal(r->used_s)
        .bindReal(r->idle_s)
        .bindReal(r->energy_j)
        .bind(r->ended)
        .run();
  }
}

}  // namespace poolrun::pool
