package schema

import (
	"time"

	"github.com/batchd/batchd/actors"
)

// Autoscale is the autoscaling policy (actors.AutoscalerConfig): when to
// add and remove devices, read from the batcher's leading signals. Absent,
// the fleet is static. Keys left out keep actors.DefaultAutoscalerConfig's
// values.
type Autoscale struct {
	// DevicesMin and DevicesMax bound the fleet; the fleet starts with
	// the configured devices, which must lie within them.
	DevicesMin int `yaml:"devices_min"`
	DevicesMax int `yaml:"devices_max"`
	// ColdStart is how long a new device takes before it can serve.
	ColdStart time.Duration `yaml:"cold_start"`
	// WaitUp: a predicted queue wait this long asks for a device;
	// SlackUp: so does a queued request with less slack while no device
	// is idle.
	WaitUp  time.Duration `yaml:"wait_up"`
	SlackUp time.Duration `yaml:"slack_up"`
	// WaitDown: the signals are low at a predicted wait of at most this,
	// with no pressure and the recommendation below the fleet.
	WaitDown time.Duration `yaml:"wait_down"`
	// DownWindow: how long the signals stay low before a device goes
	// (hysteresis); Cooldown: the least time between two decisions.
	DownWindow time.Duration `yaml:"down_window"`
	Cooldown   time.Duration `yaml:"cooldown"`
	// Every is how often the policy reads the signals.
	Every time.Duration `yaml:"every"`
}

// AutoscaleOf is the section that c holds, read every Every.
func AutoscaleOf(c actors.AutoscalerConfig, every time.Duration) Autoscale {
	return Autoscale{
		DevicesMin: c.DevicesMin, DevicesMax: c.DevicesMax, ColdStart: c.ColdStart,
		WaitUp: c.WaitUp, SlackUp: c.SlackUp, WaitDown: c.WaitDown,
		DownWindow: c.DownWindow, Cooldown: c.Cooldown, Every: every,
	}
}

// UnmarshalYAML starts from the defaults.
func (a *Autoscale) UnmarshalYAML(unmarshal func(any) error) error {
	type plain Autoscale
	p := plain(AutoscaleOf(actors.DefaultAutoscalerConfig(), time.Second))
	if err := unmarshal(&p); err != nil {
		return err
	}
	*a = Autoscale(p)
	return nil
}

// Config is the policy's actors.AutoscalerConfig.
func (a Autoscale) Config() actors.AutoscalerConfig {
	return actors.AutoscalerConfig{
		DevicesMin: a.DevicesMin, DevicesMax: a.DevicesMax, ColdStart: a.ColdStart,
		WaitUp: a.WaitUp, SlackUp: a.SlackUp, WaitDown: a.WaitDown,
		DownWindow: a.DownWindow, Cooldown: a.Cooldown,
	}
}

// Check validates the section under prefix (autoscale), for a fleet that
// starts with devices.
func (a Autoscale) Check(v *Validator, prefix string, devices int) {
	k := func(key string) string { return prefix + "." + key }
	v.IntIn(k("devices_min"), a.DevicesMin, 1, min(devices, actors.AutoscaleDevicesLimit))
	v.IntIn(k("devices_max"), a.DevicesMax, max(devices, a.DevicesMin, 1), actors.AutoscaleDevicesLimit)
	v.DurIn(k("cold_start"), a.ColdStart, 0, time.Hour)
	v.DurIn(k("wait_up"), a.WaitUp, time.Millisecond, time.Hour)
	v.DurIn(k("slack_up"), a.SlackUp, -time.Hour, time.Hour)
	v.DurIn(k("wait_down"), a.WaitDown, 0, max(a.WaitUp-1, 0))
	v.DurIn(k("down_window"), a.DownWindow, 0, 24*time.Hour)
	v.DurIn(k("cooldown"), a.Cooldown, 0, 24*time.Hour)
	v.DurIn(k("every"), a.Every, time.Millisecond, time.Hour)
}
