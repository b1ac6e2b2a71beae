//go:build unix

package workerproc

import (
	"os/exec"
	"syscall"
)

// setGroup starts the worker in a process group of its own, so that a
// kill reaches what it started too (a shell's child, a data loader), and
// none of them keeps its pipes open after it is gone.
func setGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killGroup sends SIGKILL to the worker's process group.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		_ = cmd.Process.Kill() // the group is gone; the process, if not reaped yet
	}
}
