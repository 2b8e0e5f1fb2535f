package environment

import (
	"fmt"
	"strconv"
	"strings"
)

// ContainerOptions are the limits a job asks of its container, from
// resources.shm_size and resources.docker_args.
type ContainerOptions struct {
	NanoCPUs  int64               // --cpus, in billionths of a CPU
	Memory    int64               // --memory, bytes
	ShmSize   int64               // --shm-size or resources.shm_size, bytes
	IPC       string              // --ipc (host, private, shareable)
	PidsLimit int64               // --pids-limit
	Ulimits   map[string][2]int64 // --ulimit name=soft[:hard]
}

// ParseContainerOptions reads resources.shm_size and resources.docker_args.
// Only the flags that set limits are taken: anything that would change
// what the container can reach (--privileged, -v, --network, --cap-add …)
// is refused, because a job file must not be able to widen its own access
// to the node. Errors name the field and the flag.
func ParseContainerOptions(shmSize, dockerArgs string) (ContainerOptions, error) {
	var o ContainerOptions
	if shmSize != "" {
		n, err := ParseBytes(shmSize)
		if err != nil {
			return o, fmt.Errorf("resources.shm_size: %v", err)
		}
		o.ShmSize = n
	}
	args := strings.Fields(dockerArgs)
	for i := 0; i < len(args); i++ {
		flag, val, hasVal := strings.Cut(args[i], "=")
		if !strings.HasPrefix(flag, "-") {
			return o, fmt.Errorf("resources.docker_args: %q is not a flag; only --cpus, --memory, --shm-size, --ipc, --pids-limit and --ulimit are taken", args[i])
		}
		known := map[string]bool{"--cpus": true, "--memory": true, "-m": true, "--shm-size": true, "--ipc": true, "--pids-limit": true, "--ulimit": true}
		if !known[flag] {
			return o, fmt.Errorf("resources.docker_args: %s is not allowed; only --cpus, --memory, --shm-size, --ipc, --pids-limit and --ulimit are taken, since other flags could widen what the job reaches on the node", flag)
		}
		if !hasVal {
			if i+1 == len(args) {
				return o, fmt.Errorf("resources.docker_args: %s needs a value", flag)
			}
			i++
			val = args[i]
		}
		bad := func(err error) error { return fmt.Errorf("resources.docker_args: %s %s: %v", flag, val, err) }
		switch flag {
		case "--cpus":
			f, err := strconv.ParseFloat(val, 64)
			if err != nil || f <= 0 || f > 1e6 {
				return o, bad(fmt.Errorf("want a positive number of CPUs such as 1.5"))
			}
			o.NanoCPUs = int64(f * 1e9)
		case "--memory", "-m":
			n, err := ParseBytes(val)
			if err != nil {
				return o, bad(err)
			}
			o.Memory = n
		case "--shm-size":
			n, err := ParseBytes(val)
			if err != nil {
				return o, bad(err)
			}
			o.ShmSize = n
		case "--ipc":
			if val != "host" && val != "private" && val != "shareable" {
				return o, bad(fmt.Errorf("want host, private or shareable"))
			}
			o.IPC = val
		case "--pids-limit":
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil || n < -1 {
				return o, bad(fmt.Errorf("want a whole number (-1 for no limit)"))
			}
			o.PidsLimit = n
		case "--ulimit":
			name, limits, ok := strings.Cut(val, "=")
			soft, hard, two := strings.Cut(limits, ":")
			if !two {
				hard = soft
			}
			s, err1 := strconv.ParseInt(soft, 10, 64)
			h, err2 := strconv.ParseInt(hard, 10, 64)
			if !ok || name == "" || err1 != nil || err2 != nil || s > h {
				return o, bad(fmt.Errorf("want name=soft[:hard], such as nofile=1024:4096"))
			}
			if o.Ulimits == nil {
				o.Ulimits = map[string][2]int64{}
			}
			o.Ulimits[name] = [2]int64{s, h}
		}
	}
	return o, nil
}

// ParseBytes reads a size as Docker writes it: a number with an optional
// unit b, k, m, g (powers of 1024), such as 512m or 2g.
func ParseBytes(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "b")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult, t = 1<<10, t[:n-1]
		case 'm':
			mult, t = 1<<20, t[:n-1]
		case 'g':
			mult, t = 1<<30, t[:n-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size; write a positive number with an optional unit k, m or g, such as 512m or 2g", s)
	}
	return n * mult, nil
}
