package instance

import (
	"errors"
	"fmt"
	"time"

	"github.com/ferry-ml/ferry/internal/spec"
)

// Idle shutdown bounds, as Azure ML's idle_time_before_shutdown_minutes.
const (
	MinIdleTime = 15 * time.Minute
	MaxIdleTime = 3 * 24 * time.Hour
)

// Config is what a computeinstance file says about an instance's life:
// when it stops by itself, its schedules and its setup scripts.
type Config struct {
	IdleTimeBeforeShutdown time.Duration // 0: never stop for idleness
	Schedules              []Schedule
	SetupScripts           SetupScripts
}

// IdleTime checks idle_time_before_shutdown_minutes (nil when left out,
// which turns idle shutdown off, as in Azure) and returns it as a duration.
func IdleTime(minutes *int) (time.Duration, error) {
	if minutes == nil {
		return 0, nil
	}
	d := time.Duration(*minutes) * time.Minute
	if d < MinIdleTime || d > MaxIdleTime {
		return 0, spec.Errors{{Field: "idle_time_before_shutdown_minutes", Message: fmt.Sprintf("must be from 15 to 4320 minutes (3 days), got %d", *minutes)}}
	}
	return d, nil
}

// ParseConfig reads the instance fields of a compute instance (a compute
// whose type's compute.Pool says Instance; the caller has asked it).
// Problems are one spec.Errors (errors.As finds it) listing every field
// that is wrong.
func ParseConfig(c *spec.Compute) (Config, error) {
	if c == nil {
		return Config{}, errors.New("no compute instance to read")
	}
	var cfg Config
	var es spec.Errors
	collect := func(err error) {
		var fe spec.Errors
		if errors.As(err, &fe) {
			es = append(es, fe...)
		}
	}
	var err error
	cfg.IdleTimeBeforeShutdown, err = IdleTime(c.IdleTimeBeforeShutdownMins)
	collect(err)
	cfg.Schedules, err = ParseSchedules(c.Schedules)
	collect(err)
	cfg.SetupScripts, err = ParseSetupScripts(c.SetupScripts)
	collect(err)
	if len(es) > 0 {
		return Config{}, es
	}
	return cfg, nil
}
