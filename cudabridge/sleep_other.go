//go:build !linux

package cudabridge

import "time"

// rawSleep is Linux's (DeviceConfig.WaitSleep); elsewhere it does not
// sleep, and Validate refuses WaitSleep.
func rawSleep(time.Duration) {}

// waitSleepSupported says whether DeviceConfig.WaitSleep can work here.
const waitSleepSupported = false
