//go:build !unix

package workerproc

import "os/exec"

// setGroup: no process groups here; a kill reaches the worker alone.
func setGroup(*exec.Cmd) {}

// killGroup kills the worker process.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}
