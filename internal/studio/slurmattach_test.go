package studio_test

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/testutil"
)

// detachAtEnd detaches the compute name when the test ends, if it was
// made, and waits until it is gone.
func detachAtEnd(t *testing.T, c *client.Client, name string) {
	t.Cleanup(func() {
		ctx := context.Background()
		if err := c.DeleteCompute(ctx, name); err != nil {
			return
		}
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if _, err := c.GetCompute(ctx, name); err != nil {
				return
			}
		}
		t.Errorf("%s was not detached within 60 s", name)
	})
}

// Attach the test Slurm cluster through the form. A partition the cluster
// lacks is refused beside the partition field, naming the partitions
// sinfo lists, and nothing is stored; the right one attaches, and the
// compute's page shows it ready with its partition. Over SSH, a login
// node without a host key shows the fingerprint it offers to confirm;
// confirmed, the login node is attached with that key pinned. The
// private key never comes back in a page. A job sent to the compute the
// form made goes through sbatch and its page shows its log.
func TestStudioSlurmAttachInBrowser(t *testing.T) {
	sl := testutil.RequireSlurm(t)
	testutil.RequireSSHD(t)
	s := startServerEnv(t, sl.Env)
	c := s.client()
	detachAtEnd(t, c, "hpc")
	b := newBrowser(t)
	b.signIn(s)
	b.run("open the Slurm attach form", chromedp.Navigate(s.url+"/studio/compute"),
		loads(chromedp.Click(chromedp.CSS(`a[href="/studio/compute/attach-slurm"]`))), chromedp.WaitVisible(chromedp.ID("partition")))
	b.screenshot("slurm-attach")

	work := filepath.Join(s.work, "slurm")
	b.run("send the form with a partition the cluster lacks",
		chromedp.SetValue(chromedp.ID("name"), "hpc"),
		chromedp.SetValue(chromedp.ID("partition"), "gpus"),
		chromedp.SetValue(chromedp.ID("work_dir"), work),
		loads(chromedp.Click(chromedp.ID("attach"))),
		chromedp.WaitVisible(chromedp.ID("partition-error")))
	msg := b.textOf("#partition-error")
	for _, want := range []string{`"gpus"`, sl.Partition, sl.Small} {
		if !strings.Contains(msg, want) {
			t.Errorf("partition's error %q lacks %s (the cluster's answer, listing its partitions)", msg, want)
		}
	}
	if beside := eval[bool](b, `document.getElementById("partition").parentElement.contains(document.getElementById("partition-error"))`); !beside {
		t.Error("partition's error is not beside the partition field")
	}
	if kept := get(b, "read the work dir kept", chromedp.Value(chromedp.ID("work_dir"))); kept != work {
		t.Errorf("the form lost the work dir: %q, want %q", kept, work)
	}
	if _, err := c.GetCompute(context.Background(), "hpc"); err == nil {
		t.Fatal("a Slurm attach the cluster refused made the compute")
	}
	b.screenshot("slurm-attach-error")

	b.run("send it with the cluster's partition",
		chromedp.SetValue(chromedp.ID("partition"), sl.Partition),
		loads(chromedp.Click(chromedp.ID("attach"))),
		chromedp.WaitVisible(chromedp.ID("compute-state")))
	if st := b.textOf("#compute-state"); st != "Succeeded" {
		t.Errorf("the attached Slurm cluster is %q, want Succeeded", st)
	}
	if p := b.textOf("#slurm-partition"); !strings.Contains(p, sl.Partition) {
		t.Errorf("the compute's page shows partition %q, want %s", p, sl.Partition)
	}
	if w := b.textOf("#slurm-where"); !strings.Contains(w, "server's own host") {
		t.Errorf("the compute's page says it submits %q, want on the server's own host", w)
	}
	if d := b.textOf("#delete"); d != "Detach" {
		t.Errorf("the Slurm compute's page offers %q, want Detach (the cluster stays)", d)
	}
	b.screenshot("slurm-attach-done")
	got, err := c.GetCompute(context.Background(), "hpc")
	if err != nil {
		t.Fatal(err)
	}
	if got.Type != "slurm" || got.Spec == nil || got.Spec.Partition != sl.Partition || got.Spec.WorkDir != work {
		t.Errorf("the form made %s of type %s with spec %+v; want slurm on %s in %s", got.Name, got.Type, got.Spec, sl.Partition, work)
	}
	b.run("open the compute list", chromedp.Navigate(s.url+"/studio/compute"), chromedp.WaitVisible(chromedp.CSS(`tr[data-compute="hpc"]`)))
	if row := b.textOf(`tr[data-compute="hpc"]`); !strings.Contains(row, "slurm") {
		t.Errorf("the list's row for hpc %q does not say slurm", row)
	}

	// The compute the form made takes jobs: one goes through sbatch and
	// its page in the studio shows it completed with its log.
	jobFile := filepath.Join(t.TempDir(), "job.yml")
	if err := os.WriteFile(jobFile, []byte("command: echo hello-from-slurm\ncompute: hpc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := s.ferry(t, "job", "create", "-f", jobFile, "--name", "on-hpc", "--stream"); !strings.Contains(out, "hello-from-slurm") {
		t.Errorf("the job on the attached Slurm cluster printed\n%s\nwant hello-from-slurm", out)
	}
	if j, err := c.GetJob(context.Background(), "on-hpc"); err != nil || j.Handle == "" {
		t.Errorf("the job on hpc has no Slurm job id as its handle (%v): it did not go through sbatch", err)
	}
	b.run("open the job's page", chromedp.Navigate(s.url+"/studio/jobs/on-hpc"), chromedp.WaitVisible(chromedp.ID("job-status")))
	if st, log := b.textOf("#job-status"), b.textOf("#log"); st != "Completed" || !strings.Contains(log, "hello-from-slurm") {
		t.Errorf("the job's page shows %s with the log %q; want Completed with hello-from-slurm", st, log)
	}
	b.screenshot("slurm-job")

	// Over SSH: the login node's key is shown to be confirmed first.
	// The sshd's sessions get SLURM_CONF, as a real login node's
	// /etc/slurm gives its users the cluster.
	sshd := testutil.StartSSHDEnv(t, sl.Env...)
	detachAtEnd(t, c, "hpc-login")
	key := strings.TrimSpace(string(sshd.ClientKey))
	b.run("open the form again", chromedp.Navigate(s.url+"/studio/compute/attach-slurm"), chromedp.WaitVisible(chromedp.ID("partition")))
	if off := eval[bool](b, `document.getElementById("login-node").disabled`); !off {
		t.Error("the login node's fields are open while the server's own host is chosen")
	}
	b.run("send an SSH login node without a host key",
		chromedp.SetValue(chromedp.ID("name"), "hpc-login"),
		chromedp.SetValue(chromedp.ID("partition"), sl.Partition),
		chromedp.SetValue(chromedp.ID("work_dir"), work+"-login"),
		chromedp.Click(chromedp.ID("where-ssh")),
		chromedp.SetValue(chromedp.ID("address"), sshd.Address),
		chromedp.SetValue(chromedp.ID("ssh_port"), strconv.Itoa(sshd.Port)),
		chromedp.SetValue(chromedp.ID("admin_username"), sshd.User),
		chromedp.SetValue(chromedp.ID("ssh_private_key"), key),
		loads(chromedp.Click(chromedp.ID("attach"))),
		chromedp.WaitVisible(chromedp.ID("offered-fingerprint")))
	if fp := b.textOf("#offered-fingerprint"); fp != sshd.Fingerprint {
		t.Errorf("the page offers the fingerprint %q to confirm, want the login node's %q", fp, sshd.Fingerprint)
	}
	html := get(b, "read the page", chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	if strings.Contains(html, "PRIVATE KEY") || strings.Contains(html, key[40:80]) {
		t.Error("the confirmation page holds the private key that was sent")
	}
	if ssh := get(b, "read the where choice", chromedp.Evaluate[bool](`document.getElementById("where-ssh").checked`)); !ssh {
		t.Error("the confirmation page lost the choice of SSH")
	}
	if _, err := c.GetCompute(context.Background(), "hpc-login"); err == nil {
		t.Fatal("the attach without a confirmed host key made the compute")
	}
	b.screenshot("slurm-attach-confirm")

	// Confirmed: Ferry logs in with the pinned key, runs sinfo on the
	// login node and attaches.
	keyFile := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(keyFile, sshd.ClientKey, 0o600); err != nil {
		t.Fatal(err)
	}
	b.run("confirm the key, giving the private key as its file",
		chromedp.SetUploadFiles(chromedp.ID("ssh_private_key_file"), []string{keyFile}),
		loads(chromedp.Click(chromedp.ID("confirm-attach"))),
		chromedp.WaitVisible(chromedp.ID("compute-state")))
	if w := b.textOf("#slurm-where"); !strings.Contains(w, "login node "+sshd.Address) {
		t.Errorf("the compute's page says it submits %q, want over SSH on %s", w, sshd.Address)
	}
	html = get(b, "read the page", chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	if strings.Contains(html, key[40:80]) {
		t.Error("the compute's page holds the private key")
	}
	b.screenshot("slurm-attach-login")
	got, err = c.GetCompute(context.Background(), "hpc-login")
	if err != nil {
		t.Fatal(err)
	}
	// The server pins the key it checked the fingerprint against, as a
	// known_hosts line.
	if got.Spec == nil || got.Spec.Address != sshd.Address || (got.Spec.HostKey != sshd.Fingerprint && got.Spec.HostKey != sshd.HostKeyLine) {
		t.Errorf("hpc-login has spec %+v; want address %s with the confirmed host key %q (%s) pinned", got.Spec, sshd.Address, sshd.Fingerprint, sshd.HostKeyLine)
	}
}

// The form's own checks and the API's validation come back beside their
// fields without a Slurm cluster (nothing reaches sinfo): a time limit
// that is not a number, a tier map that is not name=value, a QOS name
// with a space, a missing work_dir, an SSH choice without a login node.
// What was typed is kept; the password never is; nothing is stored.
func TestStudioSlurmFormRefusalsBesideFields(t *testing.T) {
	s := startServer(t)
	hc := noRedirects(t)
	resp, err := hc.PostForm(s.url+"/studio/signin", url.Values{"token": {s.token}})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	resp, err = hc.Get(s.url + "/studio/compute/attach-slurm")
	if err != nil {
		t.Fatal(err)
	}
	m := csrfRE.FindStringSubmatch(readAll(t, resp))
	if m == nil {
		t.Fatal("the Slurm attach page has no CSRF field")
	}
	post := func(form url.Values) (int, string) {
		t.Helper()
		form.Set("csrf", m[1])
		resp, err := hc.PostForm(s.url+"/studio/compute/attach-slurm", form)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, readAll(t, resp)
	}
	for _, tc := range []struct {
		what  string
		form  url.Values
		field string // the id of the error's element
		want  string
	}{
		{"a time limit in words", url.Values{"default_time_limit": {"two hours"}}, "default_time_limit-error", "is not a whole number of seconds"},
		{"a tier map without '='", url.Values{"job_tier_qos": {"spot scavenger"}}, "job_tier_qos-error", "is not name=value"},
		{"a nice value in words", url.Values{"priority_nice": {"low=lots"}}, "priority_nice-error", "a nice value is a whole number"},
		{"an unknown tier", url.Values{"job_tier_qos": {"gold=high"}}, "job_tier_qos-error", "is not a job tier"},
		{"a QOS with a space", url.Values{"qos": {"high prio"}}, "qos-error", "is not a Slurm qos name"},
		{"no work_dir", url.Values{"work_dir": {""}}, "work_dir-error", "is required"},
		{"SSH without a login node", url.Values{"where": {"ssh"}, "admin_password": {"pw-not-shown"}}, "address-error", "give the login node"},
		{"SSH without a secret", url.Values{"where": {"ssh"}, "address": {"127.0.0.1"}}, "secret-error", "give the password or the private key"},
		{"an unknown where", url.Values{"where": {"moon"}}, "where-error", "choose where Ferry runs sbatch"},
	} {
		form := url.Values{"name": {"hpc"}, "partition": {"debug"}, "work_dir": {"/shared/ferry"}, "where": {"local"}}
		for k, v := range tc.form {
			form[k] = v
		}
		status, page := post(form)
		if status != http.StatusUnprocessableEntity {
			t.Errorf("%s: %d, want 422", tc.what, status)
		}
		i := strings.Index(page, `id="`+tc.field+`"`)
		if i < 0 || !strings.Contains(page[i:min(len(page), i+400)], tc.want) {
			t.Errorf("%s: the page has no %s saying %q", tc.what, tc.field, tc.want)
		}
		if !strings.Contains(page, `value="debug"`) {
			t.Errorf("%s: the page lost the partition that was typed", tc.what)
		}
		if strings.Contains(page, "pw-not-shown") {
			t.Errorf("%s: the page shows the password that was sent", tc.what)
		}
	}
	if _, err := s.client().GetCompute(context.Background(), "hpc"); client.StatusOf(err) != http.StatusNotFound {
		t.Errorf("after refused forms, GetCompute(hpc) = %v, want not found", err)
	}
}
