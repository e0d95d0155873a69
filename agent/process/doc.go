// Package process is the agent's process driver (`modelplane agent
// --driver process`, DESIGN.md section 15): each replica is a child process
// started from a runtime catalogue entry (package agent/catalog).
//
// It owns a replica's process from launch to end:
//   - launch: a port on the driver's host (the agent's preferred one when
//     free, else one the kernel hands out; a runtime that exits before it is
//     ready while its port is held by someone else is started again on
//     another port, not counted as a failure), CUDA_VISIBLE_DEVICES from the
//     spec's slots (a GPU index, or the MIG device id Config.MIGDevices
//     names), OMP_NUM_THREADS and a CPU affinity of that many cores, a
//     minimal environment (never the agent's own, which holds its
//     credentials), its own process group, and, when the agent runs as
//     root, an unprivileged user (Config.RunAs);
//   - affinity is set by starting the child from an OS thread whose own
//     affinity was narrowed first (sched_setaffinity through
//     golang.org/x/sys/unix): a child inherits the mask of the thread that
//     forks it, from its first instruction, which taskset would give too
//     but through another program on every node. The thread's mask is
//     widened again before it is unlocked, so the agent's own threads keep
//     every core (it is not thrown away: a thread's exit fires the
//     Pdeathsig of children other code forked from it);
//   - the replica's token: a runtime that does not check it itself
//     (catalog.Entry.ChecksToken) listens on a loopback port of its own,
//     behind a guard on the replica's address that refuses requests
//     without it (guard.go);
//   - TLS: with the node's certificate (Config.TLS) every runtime is behind
//     a guard, which serves TLS on the replica's address and holds the key,
//     so runtimes of other users never read it; a runtime that checks the
//     token still gets it, on its pipe and in the forwarded header;
//   - logs: stdout and stderr go straight to a file per replica opened in
//     append mode (no pipe through the agent, so a runtime outlives an agent
//     restart without a broken pipe). When the file passes
//     Config.LogMaxBytes it is copied to <id>.log.1 and truncated; the
//     runtime's appends carry on at the new end. At most about twice the
//     cap is on disk per replica;
//   - readiness: Observe reports ready only once the entry's ready path
//     answers 200. A runtime not ready within Config.StartTimeout is killed
//     and counted as a failure with that reason;
//   - liveness: an exit, or Config.LiveFailures failed probes of the health
//     path in a row, is a failure; the runtime is started again, at once
//     the first time and then after an exponential backoff
//     (Config.BackoffBase doubling to Config.BackoffMax). Failures in a row
//     and the reason are reported through agent.Observation, so the agent
//     reports the replica failed and the control plane can move it;
//   - stop: the replica reports not ready, gets SIGTERM (its process
//     group), has Config.Grace to finish what is in flight, then SIGKILL;
//   - adoption: a record per replica (pid, its start time in /proc, port,
//     cores, spec hash) in Config.StateDir lets a driver of a restarted agent
//     take over the runtimes still running, without restarting them. A pid
//     whose start time differs is another process and is never signalled.
//
// Backoff, start timeout, grace and liveness interval run on the injected
// clock; waiting for a process to answer or to end is real I/O and polls.
//
// It must not decide what runs: the agent does. It imports the agent
// package for the Driver contract only.
package process
