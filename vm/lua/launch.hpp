// `crescent --nproc N script.lua args...`: the launcher of data-parallel runs (torchrun's
// single-host part). Starts N copies of this executable on the script, rank r with RANK=r,
// LOCAL_RANK=r, WORLD_SIZE=N, LOCAL_WORLD_SIZE=N, CRESCENT_DIST_FILE (the rendezvous file of
// T.distributed.init_process_group, in a fresh folder unless already set) and CRESCENT_DIST_RUN
// (a token naming this run); waits for them all. When one fails (non-zero status or a signal),
// the others get kGraceSeconds to finish, then SIGTERM, then SIGKILL (each rank leads a process
// group, which gets them); the launcher then exits with the failed rank's status and names it.
#pragma once

namespace cr {

// args: argv[0] and the arguments after --nproc N (script and its arguments, options before it)
int launch(int nproc, int argc, char** argv);

}  // namespace cr
