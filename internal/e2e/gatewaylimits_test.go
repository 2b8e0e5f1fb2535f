package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// The attacks of issue 29 on a real `ferry server`, at a bounded scale,
// with a well-behaved client scoring throughout:
//
//   - 40 connections from 40 addresses, each sending a 16 MiB body but its
//     last byte and holding that: the server's memory stays within its
//     bounds (the gateway's 64 MiB of held bodies, with what the garbage
//     collector has yet to take of their buffers as they grew; before,
//     each body was held whole, 640 MiB here), and small scoring
//     requests still get in;
//   - 200 connections from one address trickling their bodies a byte a
//     second: those over --max-conns-per-addr are turned away with 429,
//     the others cut off with 408 once --body-grace is spent, so the
//     server's open files come back down while the attackers still send;
//   - a 900 KB header and 3,000 header fields: 431 from the server, not a
//     502 from the replica they reached before;
//   - a body declared over --endpoint-max-body: 413;
//   - a body trickling to the API, on the same listener: 408.
func TestGatewayUnderAttack(t *testing.T) {
	s := startServer(t, "--local-capacity", "2", "--body-grace", "3s", "--max-conns-per-addr", "64")
	pid := s.cmd.Process.Pid
	uri, key := s.endpointKey("attacked")
	code, model := scoringApp(t)
	up := map[string]string{"code_snapshot": s.uploadDir(code), "model_snapshot": s.uploadDir(model)}
	if c, body := s.deploy("POST", "attacked", deploymentSpec("blue", "attacked", "v1", nil), up, true); c != 200 {
		t.Fatalf("create: %d %s", c, body)
	}
	if d := s.waitDeployment("attacked", "blue", "Succeeded", "Failed"); d.ProvisioningState != "Succeeded" {
		t.Fatalf("deployment: %+v", d)
	}
	s.mustFerry("online-endpoint", "update", "attacked", "--traffic", "blue=100")
	if c, body := scoreBody(t, uri, key, "", `{"data": [1]}`); c != 200 {
		t.Fatalf("score before the attacks: %d %s", c, body)
	}
	host := strings.TrimPrefix(s.url, "http://")
	path := "/endpoints/attacked/score"
	baseFDs := openFiles(t, pid)

	// A well-behaved client, from 127.0.0.1, scores all along.
	good := wellBehaved(t, uri, key)

	t.Run("held bodies", func(t *testing.T) {
		const conns, size = 40, 16 << 20
		before := rssKB(t, pid)
		var wg sync.WaitGroup
		var attackers []net.Conn
		var mu sync.Mutex
		for i := range conns {
			c := testutil.DialFrom(t, fmt.Sprintf("127.0.1.%d", i+1), host)
			mu.Lock()
			attackers = append(attackers, c)
			mu.Unlock()
			wg.Go(func() {
				fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", path, key, size)
				chunk := make([]byte, 1<<20)
				for sent := 0; sent < size-1; {
					n, err := c.Write(chunk[:min(len(chunk), size-1-sent)])
					if err != nil {
						return // turned away (429): the server stopped reading
					}
					sent += n
				}
			})
		}
		// While the bodies are sent and held, the server's memory is
		// watched; the bodies are all sent or refused when wg is done.
		peak := 0
		watch := func() {
			if kb := rssKB(t, pid); kb > peak {
				peak = kb
			}
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		for waiting := true; waiting; {
			select {
			case <-done:
				waiting = false
			case <-time.After(50 * time.Millisecond):
			}
			watch()
		}
		for range 10 { // held now: the memory they take stays
			time.Sleep(100 * time.Millisecond)
			watch()
		}
		t.Logf("server RSS %d MB before, %d MB at most with %d bodies of %d bytes held", before>>10, peak>>10, conns, size)
		if peak > 256<<10 {
			t.Errorf("server RSS reached %d MB with held bodies, over 256 MB", peak>>10)
		}
		if good.failed() {
			t.Errorf("the well-behaved client failed during the attack: %v", good.errors())
		}
		for _, c := range attackers {
			c.Close()
		}
	})

	t.Run("slow bodies", func(t *testing.T) {
		const conns = 200
		var wg sync.WaitGroup
		codes := make(chan int, conns)
		stop := make(chan struct{})
		for range conns {
			c := testutil.DialFrom(t, "127.0.0.2", host)
			wg.Go(func() {
				fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 100000\r\n\r\n", path, key)
				go func() { // a byte a second until the answer comes, or the test's end
					for {
						select {
						case <-stop:
							return
						case <-time.After(time.Second):
						}
						if _, err := c.Write([]byte("x")); err != nil {
							return
						}
					}
				}()
				_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					codes <- 0
					return
				}
				resp.Body.Close()
				codes <- resp.StatusCode
			})
		}
		peakFDs := 0
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		for waiting := true; waiting; {
			select {
			case <-done:
				waiting = false
			case <-time.After(100 * time.Millisecond):
			}
			peakFDs = max(peakFDs, openFiles(t, pid))
		}
		close(stop)
		close(codes)
		got := map[int]int{}
		for c := range codes {
			got[c]++
		}
		t.Logf("server open files: %d before, %d at most during 200 slow bodies; answers %v", baseFDs, peakFDs, got)
		if got[http.StatusTooManyRequests] != conns-64 || got[http.StatusRequestTimeout] != 64 {
			t.Errorf("answers to the slow bodies %v, want %d × 429 (over --max-conns-per-addr) and 64 × 408", got, conns-64)
		}
		// 64 admitted, and up to 64 of those turned away being closed
		// gently (httplimit's maxLingering, a second each), and a few
		// of the server's own.
		if peakFDs > baseFDs+64+64+20 {
			t.Errorf("the server had %d files open during the attack (%d before): more than the 64 connections allowed and the 64 being turned away", peakFDs, baseFDs)
		}
		if good.failed() {
			t.Errorf("the well-behaved client failed during the attack: %v", good.errors())
		}
	})

	// The API shares the listener and its limits: a body that trickles
	// to it is cut off with 408 too, in the API's own shape.
	t.Run("slow body to the API", func(t *testing.T) {
		c := testutil.DialFrom(t, "127.0.0.3", host)
		fmt.Fprintf(c, "POST /v1/online-endpoints HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", s.token)
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(500 * time.Millisecond):
				}
				if _, err := c.Write([]byte(" ")); err != nil {
					return
				}
			}
		}()
		if code, body := readAnswer(t, c); code != http.StatusRequestTimeout || !strings.Contains(body, "too slowly") {
			t.Errorf("a trickling body to the API: %d %s, want 408", code, body)
		}
	})

	t.Run("headers", func(t *testing.T) {
		// The answers are the server's own (a replica answers 431 to
		// too many fields itself, which the gateway passed on).
		for what, hdr := range map[string][2]string{
			"a 900 KB header":    {"X-Big: " + strings.Repeat("a", 900<<10) + "\r\n", "Request Header Fields Too Large"},
			"3,000 header lines": {strings.Repeat("X-Many: 1\r\n", 3000), "the server takes at most 100"},
		} {
			c := testutil.DialFrom(t, "127.0.0.1", host)
			go fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n%sContent-Length: 2\r\n\r\n{}", path, key, hdr[0])
			if code, body := readAnswer(t, c); code != http.StatusRequestHeaderFieldsTooLarge || !strings.Contains(body, hdr[1]) {
				t.Errorf("%s: %d %s, want 431 (%s)", what, code, body, hdr[1])
			}
		}
	})

	t.Run("body over the limit", func(t *testing.T) {
		c := testutil.DialFrom(t, "127.0.0.1", host)
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", path, key, 17<<20)
		if code, body := readAnswer(t, c); code != http.StatusRequestEntityTooLarge {
			t.Errorf("a 17 MiB body: %d %s, want 413", code, body)
		}
	})

	n, fails := good.stop()
	t.Logf("the well-behaved client scored %d times during the attacks", n)
	if n == 0 || len(fails) > 0 {
		t.Errorf("the well-behaved client: %d answers, failures %v", n, fails)
	}
}

// readAnswer reads the status and body of the answer on c.
func readAnswer(t *testing.T, c net.Conn) (int, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// rssKB is the resident memory of process pid, in KB.
func rssKB(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// openFiles is how many files process pid has open.
func openFiles(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// goodClient scores in a loop, from 127.0.0.1, and keeps what failed.
type goodClient struct {
	mu    sync.Mutex
	ok    int
	fails []string
	quit  chan struct{}
	done  chan struct{}
}

func wellBehaved(t *testing.T, uri, key string) *goodClient {
	t.Helper()
	g := &goodClient{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(g.done)
		for {
			select {
			case <-g.quit:
				return
			case <-time.After(100 * time.Millisecond):
			}
			code, body := scoreBody(t, uri, key, "", `{"data": [1]}`)
			g.mu.Lock()
			if code == 200 {
				g.ok++
			} else {
				g.fails = append(g.fails, fmt.Sprintf("%d %s", code, body))
			}
			g.mu.Unlock()
		}
	}()
	t.Cleanup(func() { g.stop() })
	return g
}

func (g *goodClient) failed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.fails) > 0
}

func (g *goodClient) errors() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.fails...)
}

// stop ends the client and returns its successes and failures.
func (g *goodClient) stop() (int, []string) {
	select {
	case <-g.quit:
	default:
		close(g.quit)
	}
	<-g.done
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ok, g.fails
}
