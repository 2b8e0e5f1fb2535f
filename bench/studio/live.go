package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// liveResult is one way of watching the live log: its name and each
// measured line's delay from the time the job printed it.
type liveResult struct {
	name string
	ds   []time.Duration
}

// liveJob is the job whose log is followed: it prints "ready", waits for
// the go-ahead file (so that every watcher is following before the first
// measured line), then prints lines ticks, one every 50 ms, each with the
// wall clock (time.time_ns) at the moment it was printed.
const liveJob = `python3 -u -c 'import os, sys, time
go, n = sys.argv[1], int(sys.argv[2])
print("ready", flush=True)
deadline = time.time() + 300
while not os.path.exists(go) and time.time() < deadline:
    time.sleep(0.02)
for i in range(n):
    print("tick", time.time_ns(), flush=True)
    time.sleep(0.05)' `

// observer is injected into the job page once its log follows live: for
// each line the page's script appends to the log (#log), it records the
// time the line is in the DOM (the MutationObserver runs right after the
// append, in the same task) and the time of the next animation frame
// after it (the frame that draws it). Date.now() reads the wall clock the
// job's time.time_ns() reads: both run on this machine.
const observer = `(function () {
  window.benchLines = [];
  var log = document.getElementById("log");
  new MutationObserver(function (muts) {
    var inDOM = Date.now(), got = [];
    muts.forEach(function (m) {
      m.addedNodes.forEach(function (n) {
        var x = /^tick (\d+)/.exec(n.textContent);
        if (x) got.push(x[1]);
      });
    });
    if (!got.length) return;
    requestAnimationFrame(function () {
      var frame = Date.now();
      got.forEach(function (ns) { window.benchLines.push([ns, inDOM, frame]); });
    });
  }).observe(log, {childList: true});
})()`

// logLatency submits the live job and follows its log two ways at once:
// a Go client of the job page's event stream (/studio/jobs/NAME/events,
// what the page's script reads) and, with browser, the job page itself
// in Debian's chromium. Each line's delay is the time it arrived (at the
// stream; in the page's DOM; the next frame) minus the time printed in it.
func (s *server) logLatency(tmp string, lines int, browser bool) ([]liveResult, error) {
	const name = "bench-live-log"
	goAhead := filepath.Join(tmp, "go-ahead") // tmp is 0711: a root server's job user can stat it
	spec, _ := json.Marshal(map[string]string{"name": name, "compute": "local",
		"command": liveJob + goAhead + " " + strconv.Itoa(lines)})
	body, _ := json.Marshal(map[string]json.RawMessage{"spec": spec})
	req, _ := http.NewRequest("POST", s.url+"/v1/jobs", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("submit: %s %s", resp.Status, msg)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The Go client of the event stream.
	ready := make(chan struct{})
	type streamed struct {
		ds  []time.Duration
		err error
	}
	done := make(chan streamed, 1)
	go func() {
		ds, err := s.followStream(ctx, name, ready)
		done <- streamed{ds, err}
	}()

	// The page in chromium, following the log live with the observer in.
	var b *chromium
	if browser {
		b, err = startChromium(ctx, tmp)
		if err != nil {
			return nil, err
		}
		defer b.stop()
		if err := b.openJob(s, name); err != nil {
			return nil, err
		}
	}

	select {
	case <-ready:
	case r := <-done:
		return nil, fmt.Errorf("the event stream ended before the job said it was ready: %v", r.err)
	case <-ctx.Done():
		return nil, fmt.Errorf("the job did not say it was ready in 5 minutes")
	}
	if err := os.WriteFile(goAhead, nil, 0o644); err != nil {
		return nil, err
	}

	r := <-done
	if r.err != nil {
		return nil, r.err
	}
	out := []liveResult{{"printed → event at the page's stream (Go)", r.ds}}
	if b != nil {
		inDOM, frame, err := b.lines(lines)
		if err != nil {
			return nil, err
		}
		out = append(out,
			liveResult{"printed → in the page's DOM (chromium)", inDOM},
			liveResult{"printed → next frame after it (chromium)", frame})
	}
	return out, nil
}

// followStream reads the job's event stream until its end event, closing
// ready when the job's "ready" line arrives, and returns each tick line's
// arrival minus the time printed in it.
func (s *server) followStream(ctx context.Context, name string, ready chan struct{}) ([]time.Duration, error) {
	ev, _ := http.NewRequestWithContext(ctx, "GET", s.url+"/studio/jobs/"+name+"/events", nil)
	resp, err := s.hc.Do(ev)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("event stream: %s", resp.Status)
	}
	var lat []time.Duration
	isReady := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "event: end" {
			break
		}
		if line == "data: ready" && !isReady {
			isReady = true
			close(ready)
			continue
		}
		f := strings.Fields(strings.TrimPrefix(line, "data: "))
		if !strings.HasPrefix(line, "data: ") || len(f) != 2 || f[0] != "tick" {
			continue
		}
		ns, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		lat = append(lat, time.Since(time.Unix(0, ns)))
	}
	if len(lat) == 0 {
		return nil, fmt.Errorf("no log line came over the event stream: %v", sc.Err())
	}
	return lat, nil
}

// ---- chromium ----

// chromium is Debian's chromium, headless, with a profile of its own
// under the bench's temporary directory; stop ends it and waits until no
// process of that profile is left.
type chromium struct {
	ctx     context.Context
	cancel  func()
	profile string
}

func startChromium(parent context.Context, tmp string) (*chromium, error) {
	var exe string
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(n); err == nil {
			exe = p
			break
		}
	}
	if exe == "" {
		return nil, fmt.Errorf("no chromium found: install it (apt-get install chromium) or run with -browser=false")
	}
	profile := filepath.Join(tmp, "chromium-profile")
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.UserDataDir(profile), chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-dev-shm-usage", true))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium's sandbox refuses to run as root
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(parent, opts...)
	ctx, cancelBrowser := chromedp.NewContext(actx)
	b := &chromium{ctx: ctx, profile: profile, cancel: func() { cancelBrowser(); cancelAlloc() }}
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		b.stop()
		return nil, fmt.Errorf("starting chromium: %w", err)
	}
	return b, nil
}

func (b *chromium) stop() {
	b.cancel()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		left := false
		for _, p := range testutil.Procs() {
			if strings.Contains(p.CmdLine(), b.profile) {
				left = true
			}
		}
		if !left {
			return
		}
	}
	fmt.Fprintln(os.Stderr, "bench/studio: chromium processes of the bench's profile are still running 15 s after it was closed")
}

// do runs actions with a deadline of a minute.
func (b *chromium) do(what string, actions ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Steps(actions...)); err != nil {
		return fmt.Errorf("chromium: %s: %w", what, err)
	}
	return nil
}

// openJob signs in through the sign-in form, opens the job's page, waits
// until its script follows the log live and puts the observer in.
func (b *chromium) openJob(s *server, name string) error {
	if err := b.do("sign in",
		chromedp.Navigate(s.url+"/studio/"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), s.token),
		chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.ID("computes"))); err != nil {
		return err
	}
	if err := b.do("open the job page",
		chromedp.Navigate(s.url+"/studio/jobs/"+name), chromedp.WaitVisible(chromedp.ID("log")),
		chromedp.Poll[chromedp.Void](`(document.getElementById("live-state") || {textContent: ""}).textContent.includes("live")`,
			chromedp.WithPollingTimeout(time.Minute))); err != nil {
		return err
	}
	return b.do("put the observer in", chromedp.Evaluate[chromedp.Void](observer))
}

// lines waits until the page has seen n tick lines and returns each one's
// delay to the DOM and to the next frame.
func (b *chromium) lines(n int) (inDOM, frame []time.Duration, err error) {
	if err := b.do("wait for the lines",
		chromedp.Poll[chromedp.Void](fmt.Sprintf(`window.benchLines.length >= %d`, n),
			chromedp.WithPollingTimeout(time.Minute))); err != nil {
		got, _ := chromedp.Run(b.ctx, chromedp.Evaluate[int](`window.benchLines.length`))
		return nil, nil, fmt.Errorf("%w (the page saw %d of %d lines)", err, got, n)
	}
	ctx2, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	raw, err := chromedp.Run(ctx2, chromedp.Evaluate[string](`JSON.stringify(window.benchLines)`))
	if err != nil {
		return nil, nil, err
	}
	var rows [][3]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &rows); err != nil {
		return nil, nil, err
	}
	ms := func(r json.RawMessage) (time.Time, error) {
		f, err := strconv.ParseFloat(string(r), 64)
		return time.UnixMicro(int64(math.Round(f * 1000))), err
	}
	for _, r := range rows {
		var nsText string
		if err := json.Unmarshal(r[0], &nsText); err != nil {
			return nil, nil, err
		}
		ns, err := strconv.ParseInt(nsText, 10, 64)
		if err != nil {
			return nil, nil, err
		}
		printed := time.Unix(0, ns)
		d, err1 := ms(r[1])
		f, err2 := ms(r[2])
		if err1 != nil || err2 != nil {
			return nil, nil, fmt.Errorf("the page's times: %v %v", err1, err2)
		}
		inDOM = append(inDOM, d.Sub(printed))
		frame = append(frame, f.Sub(printed))
	}
	return inDOM, frame, nil
}
