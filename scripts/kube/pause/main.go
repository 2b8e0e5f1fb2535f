// Command pause is the test cluster's pod sandbox process (the role of
// Kubernetes' pause image): it holds the pod's namespaces, reaps orphaned
// children as PID 1, and exits on SIGINT or SIGTERM. Built static by
// scripts/kube-up.sh, so no registry is needed.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
