// The process a user starts is not the one that traces. split_off_tracer()
// forks the tracer, which does all of tdctl's work; the first process (the
// guardian) only waits for it, passes on the signals sent to it, and exits
// with the tracer's status.
//
// Why: when a tracer dies, the kernel wakes each tracee without clearing the
// signal of the stop it is in, so a thread sitting in a SIGTRAP stop at a
// reporting address takes SIGTRAP and the target dumps core; and an int3
// left in memory kills the next thread that reaches it (../shared/NOTES.md
// §2). A SIGKILL of the process the user started (kill -9, a job runner, the
// OOM killer choosing the small process it was started as) reaches only the
// guardian. The tracer learns of it as a hangup (PR_SET_PDEATHSIG = SIGHUP),
// and a hangup ends tdctl with a clean detach at its one safe point.
#pragma once

namespace tdctl::cmd {

/// Forks the tracer and returns in it; in the guardian it never returns: the
/// guardian exits with the tracer's exit status (128+N if the tracer was
/// killed by signal N, after a one-line message on stderr).
///
/// own_session: the tracer calls setsid(), so signals sent to the guardian's
/// process group (a job runner's kill of the group) do not reach it; for
/// runs that neither prompt on nor launch a program into the terminal.
/// Signals sent to the guardian with kill() (SIGINT, SIGTERM, SIGHUP,
/// SIGQUIT) are passed on, and so is the terminal's hangup (sent to the
/// session leader only); the terminal's SIGINT and SIGQUIT are passed on
/// only when the tracer is in its own session (otherwise it got them too).
/// Throws tdctl::error (os) when fork or the signal set-up fails.
void split_off_tracer(bool own_session);

/// The guardian's PID, as seen from the tracer (0 before split_off_tracer()).
int guardian_pid();

}  // namespace tdctl::cmd
