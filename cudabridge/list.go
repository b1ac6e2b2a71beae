package cudabridge

import (
	"fmt"
	"io"
	"strings"
)

// DeviceInfo describes one GPU as the driver reports it.
type DeviceInfo struct {
	Ordinal     int
	Name        string
	MemoryBytes uint64
}

// DriverVersion is the CUDA driver API version, as cuDriverGetVersion
// reports it: 1000·major + 10·minor (12040 is 12.4).
type DriverVersion int

func (v DriverVersion) String() string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// ListDevices returns the driver's version and the GPUs it sees. Without a
// usable driver the error wraps ErrNoDriver and says why; a driver that
// sees no GPU gives an error wrapping ErrNoDevice.
func ListDevices() (DriverVersion, []DeviceInfo, error) {
	drv, err := loadDriver()
	if err != nil {
		return 0, nil, err
	}
	return listDevices(drv)
}

// WriteDevices writes the driver's version and one line per GPU (index,
// name, memory), as `batchd devices` lists them.
func WriteDevices(w io.Writer, v DriverVersion, devs []DeviceInfo) error {
	var b strings.Builder
	fmt.Fprintf(&b, "CUDA driver %v, %d GPU(s):\n", v, len(devs))
	for _, d := range devs {
		fmt.Fprintf(&b, "  %d  %-40s %7.1f GiB\n", d.Ordinal, d.Name, float64(d.MemoryBytes)/(1<<30))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// DeviceCount returns how many GPUs the driver sees (an error wrapping
// ErrNoDriver without a driver, ErrNoDevice for none).
func DeviceCount() (int, error) {
	_, devs, err := ListDevices()
	return len(devs), err
}

func listDevices(drv driver) (DriverVersion, []DeviceInfo, error) {
	v, err := drv.DriverVersion()
	if err != nil {
		return 0, nil, fmt.Errorf("cudabridge: %w", err)
	}
	n, err := drv.DeviceCount()
	if err != nil {
		return DriverVersion(v), nil, fmt.Errorf("cudabridge: %w", err)
	}
	if n < 1 {
		return DriverVersion(v), nil, fmt.Errorf("cudabridge: the CUDA driver %v sees no GPU: %w", DriverVersion(v), ErrNoDevice)
	}
	if n > deviceCountMax {
		return DriverVersion(v), nil, fmt.Errorf("cudabridge: the driver reports %d devices, more than %d", n, deviceCountMax)
	}
	devs := make([]DeviceInfo, 0, n)
	for i := range n {
		dev, err := drv.DeviceGet(i)
		if err != nil {
			return DriverVersion(v), nil, fmt.Errorf("cudabridge: device %d: %w", i, err)
		}
		name, err := drv.DeviceName(dev)
		if err != nil {
			return DriverVersion(v), nil, fmt.Errorf("cudabridge: device %d: %w", i, err)
		}
		mem, err := drv.DeviceTotalMem(dev)
		if err != nil {
			return DriverVersion(v), nil, fmt.Errorf("cudabridge: device %d: %w", i, err)
		}
		devs = append(devs, DeviceInfo{Ordinal: i, Name: name, MemoryBytes: mem})
	}
	return DriverVersion(v), devs, nil
}
