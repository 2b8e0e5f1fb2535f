package studio_test

import (
	"bytes"
	"context"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/client"
)

// The attach forms take the private key as a file (multipart): a file
// over 64 KiB, one that is not text, and a key both pasted and chosen
// are refused beside the file field, nothing is stored and nothing of
// the key comes back in the page; a multipart form with a wrong CSRF
// token is refused as a plain one is.
func TestStudioAttachKeyFileRefusals(t *testing.T) {
	s := startServer(t)
	hc := noRedirects(t)
	resp, err := hc.PostForm(s.url+"/studio/signin", url.Values{"token": {s.token}})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	resp, err = hc.Get(s.url + "/studio/compute/attach")
	if err != nil {
		t.Fatal(err)
	}
	page := readAll(t, resp)
	if !strings.Contains(page, `enctype="multipart/form-data"`) || !strings.Contains(page, `type="file"`) || !strings.Contains(page, `name="ssh_private_key_file"`) {
		t.Fatal("the attach page has no multipart form with a key file input")
	}
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("the attach page has no CSRF field")
	}
	post := func(path, csrf string, fields map[string]string, fileName string, file []byte) (int, string) {
		t.Helper()
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		mw.WriteField("csrf", csrf)
		for k, v := range fields {
			mw.WriteField(k, v)
		}
		fw, err := mw.CreateFormFile("ssh_private_key_file", fileName)
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(file)
		mw.Close()
		resp, err := hc.Post(s.url+path, mw.FormDataContentType(), &body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, readAll(t, resp)
	}
	const marker = "KEYMATERIAL-not-shown"
	key := []byte("-----BEGIN OPENSSH PRIVATE KEY-----\n" + marker + "\n-----END OPENSSH PRIVATE KEY-----\n")
	big := append([]byte("-----BEGIN OPENSSH PRIVATE KEY-----\n"+marker+"\n"), bytes.Repeat([]byte("A"), 70<<10)...)
	vm := map[string]string{"name": "box", "address": "127.0.0.1", "ssh_port": "22", "admin_username": "u"}
	slurm := map[string]string{"name": "hpc", "partition": "debug", "work_dir": "/shared/ferry", "where": "ssh", "address": "127.0.0.1", "ssh_port": "22", "admin_username": "u"}
	with := func(m map[string]string, k, v string) map[string]string {
		n := map[string]string{k: v}
		for a, b := range m {
			n[a] = b
		}
		return n
	}
	for _, tc := range []struct {
		what, path string
		fields     map[string]string
		file       []byte
		want       string
	}{
		{"a 70 KiB file", "/studio/compute/attach", vm, big, "a private key file is at most 64 KiB"},
		{"a key pasted and chosen", "/studio/compute/attach", with(vm, "ssh_private_key", string(key)), key, "paste its text or choose its file, not both"},
		{"a file that is not text", "/studio/compute/attach", vm, []byte{0xff, 0, 0xfe, 1}, "is empty or not text"},
		{"Slurm: a 70 KiB file", "/studio/compute/attach-slurm", slurm, big, "a private key file is at most 64 KiB"},
		{"Slurm: a key pasted and chosen", "/studio/compute/attach-slurm", with(slurm, "ssh_private_key", string(key)), key, "paste its text or choose its file, not both"},
	} {
		status, page := post(tc.path, m[1], tc.fields, "id_ed25519", tc.file)
		if status != http.StatusUnprocessableEntity {
			t.Errorf("%s: %d, want 422", tc.what, status)
		}
		i := strings.Index(page, `id="ssh_private_key_file-error"`)
		if i < 0 || !strings.Contains(page[i:min(len(page), i+400)], tc.want) {
			t.Errorf("%s: the page has no error beside the key file saying %q", tc.what, tc.want)
		}
		if strings.Contains(page, marker) {
			t.Errorf("%s: the page shows the key that was sent", tc.what)
		}
		if strings.Contains(page, `id="secret-error"`) {
			t.Errorf("%s: the page also says no secret was given", tc.what)
		}
		if !strings.Contains(page, `value="127.0.0.1"`) {
			t.Errorf("%s: the page lost the host that was typed", tc.what)
		}
	}
	if status, page := post("/studio/compute/attach", "not-the-token", vm, "id_ed25519", key); status != http.StatusForbidden || !strings.Contains(page, "CSRF") {
		t.Errorf("a multipart attach with a wrong CSRF token: %d %q, want 403 naming the CSRF token", status, page)
	}
	for _, name := range []string{"box", "hpc"} {
		if _, err := s.client().GetCompute(context.Background(), name); client.StatusOf(err) != http.StatusNotFound {
			t.Errorf("after refused forms, GetCompute(%s) = %v, want not found", name, err)
		}
	}
}
