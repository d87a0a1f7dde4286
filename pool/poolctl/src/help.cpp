// poolctl's words: its usage and each command's help (poolctl.hpp).

#include <map>
#include <string>

#include "poolctl.hpp"

namespace poolrun::pool::ctl {

using nlohmann::json;

const char* const kUsage =
    "usage: poolctl [--pool URI] [--token-file FILE] [--json] COMMAND [ARGS]\n"
    "commands:\n"
    "  status | nodes | leases | queue     look at the pool\n"
    "  quota                               GPUs used against each quota (poold --quotas)\n"
    "  fairshare                           the account tree's shares, decayed usage and fair-share\n"
    "                                      factors (sshare's view; poold --accounts)\n"
    "  queue --explain                     the queue, and each factor of each request's priority\n"
    "  reserve --nodes NODES --duration D [--start T] [--users U,...] [--accounts A,...] [--name N]\n"
    "                                      (admin) keep nodes for a window (docs/reservations.md)\n"
    "  reservations | unreserve NAME       list them; (admin) remove one\n"
    "  top [--interval SECONDS] [--once]   a live view of nodes, GPUs, leases and the queue; q quits\n"
    "  acquire -n N|MIN:MAX [--gpus-per-node K | --whole-nodes] [--ttl SECONDS] [--wait SECONDS]\n"
    "          [--max-duration SECONDS] [--priority P] [--account A] [--reservation R] [--job NAME]\n"
    "          [--model TEXT]\n"
    "          [--min-memory-gib G] [--fabric ib|roce|tcp] [--label KEY=VALUE]... [--one-switch]\n"
    "          [--placement strict|best-effort]\n"
    "          [--exclude NODES]\n"
    "          [--no-reclaim] [--preemptible] [--resize-interval SECONDS] [--mig PROFILE[+]]\n"
    "          [--share FRACTION] [--gpu-memory BYTES]\n"
    "  renew LEASE | release LEASE | shrink LEASE\n"
    "  register [--cluster FILE]           (admin) add nodes; without --cluster, probe this node\n"
    "  drain NODE | resume NODE            (admin) stop / restart new leases on a node\n"
    "  fail NODE:GPU | NODE                (admin) mark a GPU, or every GPU of a node, failed\n"
    "  mig NODE:GPU --profiles P,P... [--wait SECONDS]\n"
    "                                      (admin) split a GPU into MIG instances (docs/mig.md)\n"
    "  node-token create [--expires DURATION] | list | revoke NODE\n"
    "                                      (admin) one-time join tokens for new nodes' agents\n"
    "  jobs [--user U] [--state S] [--name N]   detached jobs (poolrun --detach; docs/jobs.md)\n"
    "  job ID                              everything about one job (an array's number: every task)\n"
    "  cancel ID...|--name N|--user U [--signal SIG]  end jobs: a pending one at once, a running one by SIG\n"
    "  history [--since T] [--until T] [--user U] [--csv]  jobs that have ended (sacct's view)\n"
    "  usage [--by B] [--since T] [--until T] [--format F]  GPU-hours used and idle, energy (sreport)\n"
    "  events [--since SEQ] [--follow]     poold's event log: grants, releases, expiries, nodes, GPUs\n"
    "options:\n"
    "  --pool URI        local (default, or $POOLRUN_POOL), sim:CLUSTER_FILE, http://HOST:PORT or\n"
    "                    https://HOST:PORT (poold replicas on etcd: https://A:PORT,https://B:PORT)\n"
    "  --token-file FILE the bearer token for http and https pools (else $POOLRUN_TOKEN)\n"
    "  --ca FILE         https pools: the CAs to trust, PEM (else $POOLRUN_CA, else the system's)\n"
    "  --state DIR       state directory of local and sim: pools (else $POOLRUN_STATE_DIR)\n"
    "  --owner NAME, --role user|admin   identity in local and sim: pools (default $USER, admin)\n"
    "  --json            machine-readable output on stdout\n"
    "defaults: --ttl 60 (a lease not renewed within its ttl expires; poolrun renews every ttl/3),\n"
    "  --wait: without limit while the pool could ever satisfy the request, fail at once otherwise\n"
    "exit status: 0 done, 1 error, 2 bad input, 3 did not fit (within --wait, or never),\n"
    "  4 refused (401 unknown token, 403 not allowed), 5 lease gone (renew, shrink; release of a lease\n"
    "  not held says so and exits 0), 128+N interrupted by signal N while queued (the request is withdrawn)\n"
    "environment:\n"
    "  POOLRUN_POOL       the pool when --pool is not given\n"
    "  POOLRUN_TOKEN      the bearer token when --token-file is not given\n"
    "  POOLRUN_CA         the CAs of https pools when --ca is not given\n"
    "  POOLRUN_MUNGE_SOCKET  without a token, the munged that makes this user's MUNGE credential for\n"
    "                     an http or https pool (default /run/munge/munge.socket.2)\n"
    "  POOLRUN_STATE_DIR  the state directory when --state is not given (else $XDG_STATE_HOME/poolrun,\n"
    "                     else $HOME/.local/state/poolrun)\n"
    "  USER               the owner in local and sim: pools when --owner is not given\n"
    "  POOLRUN_FIXTURES   where cluster files' shared/fixtures/ topologies are (sim:, register)\n"
    "  POOLRUN_PREEMPT_GRACE, POOLRUN_MIN_RUNTIME, POOLRUN_QUOTAS  local and sim: pools' preemption\n"
    "                     grace and minimum runtime (seconds) and quotas file (poold's --preempt-grace,\n"
    "                     --min-runtime, --quotas)\n"
    "`poolctl help COMMAND` or `poolctl COMMAND --help`: that command's help; `poolctl --version`.\n";

namespace {

const std::map<std::string, const char*> kHelp = {
    {"status",
     "usage: poolctl [--pool URI] [--json] status\n"
     "The pool in one line: nodes (up, draining, down; of them unreachable: their agent went quiet),\n"
     "GPUs (free, leased, failed, foreign: busy with processes of no lease; of them on unreachable\n"
     "nodes), leases, queued.\n"},
    {"nodes",
     "usage: poolctl [--pool URI] [--json] nodes\n"
     "Every node: its state (up, draining, down, unreachable), leaf switch, fabric, agent (or \"no\n"
     "agent\"), the age of its last heartbeat and its GPUs (free/leased/failed/foreign); under it a line\n"
     "per GPU: state, utilisation, memory used/total (GiB), temperature, power, lease, and why it\n"
     "failed (and when) or the processes of no lease that make it foreign. A node without an agent\n"
     "has no readings: only its leased and failed GPUs get a line.\n"},
    {"leases",
     "usage: poolctl [--pool URI] [--json] leases\n"
     "Every lease held: its id, job, owner, GPUs, age, idle time (where the pool finds its GPUs\n"
     "unused: poold --idle-after), expiry, end, and a note: when the pool reclaims it as idle (poold\n"
     "--reclaim-idle), the nodes at risk (unreachable), or that it is never reclaimed (--no-reclaim).\n"},
    {"queue",
     "usage: poolctl [--pool URI] [--json] queue [--explain]\n"
     "The waiting requests in the order they will be served: position, ticket, GPUs, priority, owner,\n"
     "job. Where the pool has accounts (poold --accounts), the order is the multi-factor priority's;\n"
     "--explain adds each request's factors (fair share, age, size, its priority) and their weighted\n"
     "sum (docs/fairshare.md). --json has them as each request's `factors`.\n"},
    {"reserve",
     "usage: poolctl [--pool URI] reserve --nodes NODES --duration D [--start T] [--users U,...]\n"
     "                                    [--accounts A,...] [--name N]\n"
     "(admin) Keeps NODES (n[01-04],n07) for D (3600, 90m, 12h, 2d; at most 366 days) from T (now,\n"
     "+2h, 2026-12-08T06:00:00Z or a day, UTC): no lease that would run into the window is placed on\n"
     "them; inside it only the users and accounts named lease them, with --reservation NAME, and their\n"
     "leases end with it. Naming nobody makes a maintenance window: its nodes are drained at its\n"
     "start. Refused: nodes the pool does not have, a start in the past, a window that overlaps\n"
     "another reservation of one of its nodes (docs/reservations.md).\n"},
    {"reservations",
     "usage: poolctl [--pool URI] [--json] reservations\n"
     "Each reservation: its name, window, nodes and who may lease them.\n"},
    {"unreserve",
     "usage: poolctl [--pool URI] unreserve NAME\n"
     "(admin) Removes a reservation: its nodes take any lease again; leases inside it keep their end.\n"},
    {"fairshare",
     "usage: poolctl [--pool URI] [--json] fairshare\n"
     "The account tree (poold --accounts, POOLRUN_ACCOUNTS for the embedded pools) as sshare shows it:\n"
     "each account and user with its shares, normalised shares, usage (allocated GPU-hours, halved\n"
     "every --fairshare-half-life), normalised and effective usage and fair-share factor (Slurm's\n"
     "classic formula, 2^(-effective usage / normalised shares)), and the weights of the priority that\n"
     "orders the queue (docs/fairshare.md).\n"},
    {"quota",
     "usage: poolctl [--pool URI] [--json] quota\n"
     "Each quota of the pool (poold --quotas, POOLRUN_QUOTAS for the embedded pools): the group or\n"
     "owner, its members, the GPUs guaranteed, its limit, the GPUs its owners hold, how many of those\n"
     "are borrowed beyond the guarantee (their youngest leases: preempted first when an owner within\n"
     "its guarantee needs them), and the GPUs its owners' waiting requests ask for.\n"},
    {"top",
     "usage: poolctl [--pool URI] top [--interval SECONDS] [--once]\n"
     "A live view, redrawn in place every interval: the pool, the time, nodes up and unreachable,\n"
     "GPUs free, leased, failed and foreign, leases and the queue's length; each node and its GPUs\n"
     "with utilisation and memory bars; the leases with owner, GPUs, age and idle time; the queue\n"
     "with positions, waits and reasons. Fits the terminal (lines are cut, not wrapped). q or Ctrl-C\n"
     "quits (exit 0). Where the pool cannot be read, the header says why and it tries again.\n"
     "With --once, or when stdout is not a terminal: one frame without escapes ($COLUMNS x $LINES,\n"
     "else 80x24), exit status 0, or 1 where the pool could not be read.\n"
     "  --interval SECONDS   between refreshes, 1 to 3600 (default 2)\n"
     "  --once               print one frame and exit\n"},
    {"acquire",
     "usage: poolctl [--pool URI] [--json] acquire -n N [options]\n"
     "Takes N GPUs (all or nothing) and prints the lease; queues while they are not free.\n"
     "  -n, --gpus N             GPUs to take\n"
     "  -n, --gpus MIN:MAX       an elastic lease: MIN GPUs (all or nothing), grown towards MAX while\n"
     "                           GPUs are free and nobody of equal or higher priority waits, shrunk\n"
     "                           back towards MIN for a request of higher priority\n"
     "  --resize-interval SECONDS  an elastic lease grows at most this often (default 600)\n"
     "  --gpus-per-node K        exactly K on each node\n"
     "  --whole-nodes            whole nodes only: every GPU of each node it takes\n"
     "  --ttl SECONDS            the lease expires unless renewed within SECONDS (default 60)\n"
     "  --wait SECONDS           give up queueing after SECONDS (default: while it could ever fit)\n"
     "  --max-duration SECONDS   the lease ends after SECONDS however it is renewed\n"
     "  --priority P             queue priority (higher first)\n"
     "  --account A              the account charged (the pool's accounts file; default: yours)\n"
     "  --reservation R          lease inside reservation R (its nodes, its window)\n"
     "  --job NAME               the job's name, shown in leases and queue\n"
     "  --model TEXT             only GPUs whose model contains TEXT\n"
     "  --mig PROFILE            N MIG instances of that profile (1g.10gb, 3g.40gb) instead of whole\n"
     "                           GPUs, packed onto as few GPUs as possible; PROFILE+: that or larger\n"
     "  --share FRACTION         N MPS shares (one per GPU) of 0.25 or 25% of a GPU's SMs (and memory)\n"
     "  --gpu-memory BYTES       N MPS shares with this much device memory each (512M, 10G)\n"
     "  --min-memory-gib G       only GPUs with at least G GiB\n"
     "  --fabric ib|roce|tcp     only nodes with that fabric\n"
     "  --label KEY=VALUE        only nodes with that label (repeatable)\n"
     "  --one-switch             only nodes under one leaf switch\n"
     "  --placement strict|best-effort\n"
     "                           strict: wait rather than cross more NVLink domains, leaves or spines\n"
     "                           than an empty pool would (docs/placement.md)\n"
     "  --exclude NODES          never these nodes (n01,n[05-08]; repeatable)\n"
     "  --no-reclaim             (admin) never end the lease as idle (poold --reclaim-idle); a user's\n"
     "                           token is refused (exit status 4)\n"
     "  --preemptible            a waiting request of higher priority may preempt the lease (its\n"
     "                           holder gets the pool's grace period to end the job)\n"
     "exit status: 3 when it does not fit within --wait (or never can); 128+N when signal N (Ctrl-C:\n"
     "130) interrupts the wait: the queued request is withdrawn first.\n"},
    {"renew",
     "usage: poolctl [--pool URI] [--json] renew LEASE\n"
     "Extends LEASE by its TTL from now. Exit status 5 when the lease is gone.\n"},
    {"release",
     "usage: poolctl [--pool URI] [--json] release LEASE\n"
     "Gives LEASE's GPUs back to the pool.\n"},
    {"shrink",
     "usage: poolctl [--pool URI] [--json] shrink LEASE\n"
     "An elastic lease under a shrink notice gives the GPUs it names back now (its job has left\n"
     "them), instead of at the notice's deadline; prints the lease. Exit status 5 when it is gone.\n"},
    {"register",
     "usage: poolctl [--pool URI] register [--cluster FILE]\n"
     "(admin) Adds the nodes of a cluster file, or without --cluster this node, probed.\n"},
    {"drain",
     "usage: poolctl [--pool URI] drain NODE\n"
     "(admin) NODE takes no new lease; its leases run on.\n"},
    {"resume",
     "usage: poolctl [--pool URI] resume NODE\n"
     "(admin) NODE takes new leases again.\n"},
    {"mig",
     "usage: poolctl --pool http://HOST:PORT mig NODE:GPU --profiles PROFILE[,PROFILE...] [--wait "
     "SECONDS]\n"
     "(admin) Splits the GPU into MIG instances: a GPU instance of each profile, in order, with one\n"
     "compute instance each (3g.40gb,3g.40gb; 1g.10gb,1g.10gb,2g.20gb,3g.40gb). The GPU and its\n"
     "instances take no new lease; once none is held, the node's agent makes the layout through NVML\n"
     "(as root; turning MIG mode on may wait for a GPU reset) and the new instances are leased. A\n"
     "layout that cannot be made fails the GPU with the reason (poolctl nodes; poolctl resume NODE).\n"
     "  --wait SECONDS   wait that long for the layout to be made, and say how it went (exit status\n"
     "                   1 when it failed or the time ran out; the request stays)\n"},
    {"node-token",
     "usage: poolctl --pool URI node-token create [--expires DURATION]\n"
     "       poolctl --pool URI [--json] node-token list\n"
     "       poolctl --pool URI node-token revoke NODE\n"
     "(admin) Nodes that join (docs/pool.md). create: prints a one-time join token (alone on stdout;\n"
     "what it is on stderr) that `poold-agent --join TOKEN` on a new node exchanges, once, for a\n"
     "credential of its own; it expires after DURATION (90s, 30m, 1h, 7d; default 1h, at most 30d).\n"
     "list: the tokens poold keeps (never the tokens themselves) and the nodes that joined. revoke:\n"
     "the node's credential is refused from its next request on; to join it again, make a new token.\n"},
    {"jobs",
     "usage: poolctl --pool URI [--json] jobs [--user U] [--state S] [--name N]\n"
     "The jobs the poold keeps (poolrun --detach; docs/jobs.md), oldest first: id, name, user, state\n"
     "(PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, PREEMPTED, REQUEUED, NODE_FAIL), run\n"
     "time, GPUs, the node its launcher runs on, and why it waits or ended (with its planned start).\n"},
    {"job",
     "usage: poolctl --pool URI [--json] job ID\n"
     "Everything about one job: its request, command, directory, output files, dependencies, times,\n"
     "lease and node, exit status, restarts, and while it waits, why and its planned start. J12\n"
     "names every task of array J12; J12_3 one.\n"},
    {"cancel",
     "usage: poolctl --pool URI cancel ID... | --name N | --user U [--signal SIG]\n"
     "Ends jobs (J12: every task of array J12; --name, --user: every job of that name or user not\n"
     "ended yet): a pending one at once; a running one by sending SIG (default TERM) to its launcher,\n"
     "which ends its ranks and gives its GPUs back. A user cancels their own jobs; an administrator\n"
     "anyone's.\n"},
    {"history",
     "usage: poolctl --pool URI [--json] history [--since T] [--until T] [--user U] [--state S]\n"
     "                                           [--name N] [--csv]\n"
     "The jobs that have ended (sacct's view; kept for poold's --job-retention), oldest first: id,\n"
     "name, user, state, exit status or signal, start, end, run time, GPUs, node. --since/--until:\n"
     "those that ended from T on, before T; T is a time (2026-12-01T08:00:00Z), a day (2026-12-01,\n"
     "UTC) or how long ago (12h, 7d). --csv: one line a job with a header, for a spreadsheet.\n"},
    {"usage",
     "usage: poolctl --pool URI usage [--by owner|account|job|node|gpu-model] [--since T] [--until T]\n"
     "                                [--format table|csv|json]\n"
     "The usage ledger (poold's, kept across restarts): per owner (default), account (the lease's,\n"
     "docs/fairshare.md; without accounts the owner's quota group), job, node or GPU model, the leases "
     "counted, GPU-hours allocated, used (each GPU's\n"
     "utilisation integrated) and idle (under poold's --idle-utilization), efficiency (used over\n"
     "allocated) and energy in kWh; the most allocated first, then a total. --since/--until: a lease\n"
     "that ran partly inside counts in proportion; T is a time (2026-12-01T08:00:00Z), a day\n"
     "(2026-12-01, UTC) or how long ago (12h, 7d). Running leases count up to their last heartbeat.\n"},
    {"fail",
     "usage: poolctl [--pool URI] fail NODE:GPU | NODE\n"
     "(admin) Marks GPU (its index) of NODE failed, or every GPU of NODE: leased no more until\n"
     "`poolctl resume NODE`.\n"},
    {"events",
     "usage: poolctl --pool http://HOST:PORT [--json] events [--since SEQ] [--follow]\n"
     "poold's event log, one line per event: grants, releases, expiries, node state changes, GPU\n"
     "failures (docs/operations.md). Without --since, every event poold keeps; with --follow and\n"
     "without --since, the last 10, then each new one as it comes, until Ctrl-C (exit 0), waiting for\n"
     "poold where it is down. --json: each event as its JSON line.\n"
     "  --since SEQ   only the events after SEQ\n"
     "  --follow      keep printing events as they come\n"},
};

}  // namespace

const char* commandHelp(const std::string& command) {
  auto it = kHelp.find(command);
  return it == kHelp.end() ? nullptr : it->second;
}

}  // namespace poolrun::pool::ctl
