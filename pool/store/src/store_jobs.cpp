// The jobs and reservations tables of the SQLite state file (jobs the pool keeps: job_book.hpp;
// reservations.hpp): one row per job or reservation, as JSON (job_json.hpp, json.hpp).

#include <sqlite3.h>

#include "poolrun/common/names.hpp"
#include "poolrun/pool/job_json.hpp"
#include "poolrun/pool/json.hpp"
#include "poolrun/pool/store.hpp"
#include "sqlite_steps.hpp"

namespace poolrun::pool {

using nlohmann::json;
using sql::refusal;
using sql::Step;
using sql::text;

void Store::loadJobs(PoolState& state) {
  sqlite3_stmt* st = prepare("SELECT id, doc FROM jobs");
  Step s(db_.get(), st);
  while (s.row()) {
    const std::string id = text(st, 0);
    try {
      JobRecord job = jobFromJson(json::parse(text(st, 1)));
      if (job.id != id) throw std::runtime_error("it names job '" + common::printable(job.id) + "'");
      state.loadJob(std::move(job));
    } catch (const std::exception& e) {
      throw refusal(file_,
                    "job " + common::printable(id) + ": its stored document is broken (" + e.what() + ")");
    }
  }
}

void Store::writeJobs(const PoolState& state, const Dirty& dirty) {
  for (const std::string& id : dirty.jobs) {
    const JobRecord* job = state.jobs().find(id);
    if (job == nullptr)
      Step(db_.get(), prepare("DELETE FROM jobs WHERE id = ?")).bind(id).run();
    else
      Step(db_.get(), prepare("INSERT OR REPLACE INTO jobs(id, doc) VALUES(?, ?)"))
          .bind(id)
          .bind(toJson(*job).dump(-1, ' ', false, json::error_handler_t::replace))
          .run();
  }
}

void Store::loadReservations(PoolState& state) {
  sqlite3_stmt* st = prepare("SELECT name, doc FROM reservations");
  Step s(db_.get(), st);
  while (s.row()) {
    const std::string name = text(st, 0);
    try {
      Reservation r = reservationFromJson(json::parse(text(st, 1)));
      if (r.name != name)
        throw std::runtime_error("it names reservation '" + common::printable(r.name) + "'");
      state.loadReservation(std::move(r));
    } catch (const std::exception& e) {
      throw refusal(file_, "reservation " + common::printable(name) + ": its stored document is broken (" +
                               e.what() + ")");
    }
  }
}

void Store::writeReservations(const PoolState& state, const Dirty& dirty) {
  for (const std::string& name : dirty.reservations) {
    auto it = state.reservations().find(name);
    if (it == state.reservations().end())
      Step(db_.get(), prepare("DELETE FROM reservations WHERE name = ?")).bind(name).run();
    else
      Step(db_.get(), prepare("INSERT OR REPLACE INTO reservations(name, doc) VALUES(?, ?)"))
          .bind(name)
          .bind(toJson(it->second).dump(-1, ' ', false, json::error_handler_t::replace))
          .run();
  }
}

}  // namespace poolrun::pool
