package chaos

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill the child when the run's process dies (a test binary
// that timed out, a kill -9 of the run), so that no broker or member outlives its run.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
