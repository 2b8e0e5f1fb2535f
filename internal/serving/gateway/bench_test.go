package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// BenchmarkGatewayHop is one scoring request through the gateway to a Go
// replica, for profiles of the gateway's own work (bench/endpoint has the
// figures against a real replica).
func BenchmarkGatewayHop(b *testing.B) {
	rep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte(`{"echo": 7}`))
	}))
	defer rep.Close()
	g := New(Options{})
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{"d": 100},
		Deployments: map[string]Deployment{"d": {Replicas: []string{rep.URL}, RequestTimeout: 5 * time.Second, MaxConcurrent: 8}}})
	srv := httptest.NewServer(g)
	defer srv.Close()
	c := &http.Client{}
	b.ResetTimer()
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/endpoints/ep/score", strings.NewReader(`{"x": 7}`))
		req.Header.Set("Authorization", "Bearer "+key1)
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
