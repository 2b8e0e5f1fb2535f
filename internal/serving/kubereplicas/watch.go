package kubereplicas

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// syncTimeout bounds how long WatchReady waits for the informer's first
// list.
const syncTimeout = 30 * time.Second

// WatchReady follows the EndpointSlices of the deployment's Service with
// an informer and calls onChange with the base URLs
// ("http://POD_IP:PORT", sorted) of the replicas that are ready and not
// terminating: once with what is there when the informer has synced,
// then whenever that set changes. Calls come one at a time, from one
// goroutine; onChange must not block for long.
//
// WatchReady returns once the first call is made, or with an error when
// the informer could not sync. stop ends the watch and returns once no
// call of onChange is under way or will come; ctx ending ends it too
// (stop must still be called, to wait).
func (c *Client) WatchReady(ctx context.Context, endpoint, deployment string, onChange func(replicas []string)) (stop func(), err error) {
	name := ObjectName(endpoint, deployment)
	inf := c.cs.DiscoveryV1().EndpointSlices(c.ns).Informer(discoveryv1.LabelServiceName + "=" + name)
	ctx, cancel := context.WithCancel(ctx)

	var (
		mu     sync.Mutex // serializes onChange and guards last
		last   = "\x00"   // no call yet
		synced bool
	)
	publish := func() {
		mu.Lock()
		defer mu.Unlock()
		if !synced || ctx.Err() != nil {
			return
		}
		urls := readyURLs(inf.GetStore().List())
		key := fmt.Sprint(urls)
		if key == last {
			return
		}
		last = key
		onChange(urls)
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { publish() },
		UpdateFunc: func(any, any) { publish() },
		DeleteFunc: func(any) { publish() },
	}
	if _, err := inf.AddEventHandler(handler); err != nil {
		cancel()
		return nil, fmt.Errorf("deployment %s/%s: watch EndpointSlices: %w", endpoint, deployment, err)
	}
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		inf.RunWithContext(ctx)
	}()
	syncCtx, syncCancel := context.WithTimeout(ctx, syncTimeout)
	ok := cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced)
	syncCancel()
	stop = func() {
		cancel()
		<-ran
		mu.Lock() // a call under way has returned
		mu.Unlock()
	}
	if !ok {
		stop()
		return nil, fmt.Errorf("deployment %s/%s: the EndpointSlices of Service %s in namespace %s could not be listed within %v (is the cluster up, and may these credentials list endpointslices.discovery.k8s.io?)",
			endpoint, deployment, name, c.ns, syncTimeout)
	}
	mu.Lock()
	synced = true
	mu.Unlock()
	publish()
	return stop, nil
}

// readyURLs are the base URLs of the ready, non-terminating endpoints of
// slices (each "http://IP:PORT", sorted, without duplicates).
func readyURLs(objs []any) []string {
	urls := []string{}
	for _, o := range objs {
		s, ok := o.(*discoveryv1.EndpointSlice)
		if !ok {
			continue
		}
		var port int32
		for _, p := range s.Ports {
			if p.Port != nil && (p.Name == nil || *p.Name == portName) {
				port = *p.Port
			}
		}
		if port == 0 {
			continue
		}
		for _, ep := range s.Endpoints {
			c := ep.Conditions
			if c.Ready == nil || !*c.Ready || (c.Terminating != nil && *c.Terminating) || len(ep.Addresses) == 0 {
				continue
			}
			urls = append(urls, "http://"+net.JoinHostPort(ep.Addresses[0], strconv.Itoa(int(port))))
		}
	}
	slices.Sort(urls)
	return slices.Compact(urls)
}
