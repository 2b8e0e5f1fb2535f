package testutil

import (
	"os"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// SwapWithLink plays a job racing Ferry's privileged code: it puts a
// symlink to target beside dir (dir + ".swap") and exchanges the two
// (renameat2 RENAME_EXCHANGE, atomic) in a loop until the returned func is
// called, which leaves the real folder at dir. It is called at the end of
// the test too, should the test fail first.
func SwapWithLink(t testing.TB, dir, target string) (stop func()) {
	t.Helper()
	link := dir + ".swap"
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-quit:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, dir, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("renameat2 %s: %v", dir, err)
				return
			}
		}
	})
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(quit)
			wg.Wait()
			if fi, err := os.Lstat(dir); err == nil && fi.Mode()&os.ModeSymlink != 0 {
				_ = unix.Renameat2(unix.AT_FDCWD, dir, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
