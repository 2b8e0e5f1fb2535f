package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// remoteData is a loopback HTTP server standing in for the web and for a
// public Azure blob container (account ferrytest, container data, at
// /blob): files with ETags that answer conditional requests, and List
// Blobs' XML. It counts the requests for each path, full and conditional.
type remoteData struct {
	mu    sync.Mutex
	files map[string]string // URL path -> content
	full  map[string]int
	cond  map[string]int
}

func (d *remoteData) counts(p string) (full, cond int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.full[p], d.cond[p]
}

func (d *remoteData) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	q := r.URL.Query()
	if r.URL.Path == "/blob/data" && q.Get("comp") == "list" && q.Get("restype") == "container" {
		var names []string
		for p := range d.files {
			if name, ok := strings.CutPrefix(p, "/blob/data/"); ok && strings.HasPrefix(name, q.Get("prefix")) {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		w.Header().Set("Content-Type", "application/xml")
		fmt.Fprintf(w, `<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="http://%s/blob/" ContainerName="data"><Prefix>%s</Prefix><Blobs>`, r.Host, q.Get("prefix"))
		for _, n := range names {
			fmt.Fprintf(w, `<Blob><Name>%s</Name><Properties><Etag>0x1</Etag><Content-Length>%d</Content-Length><BlobType>BlockBlob</BlobType></Properties></Blob>`, n, len(d.files["/blob/data/"+n]))
		}
		fmt.Fprint(w, `</Blobs><NextMarker /></EnumerationResults>`)
		return
	}
	if r.URL.Path == "/slow" {
		// Never answers: a download a cancel must stop.
		d.mu.Unlock()
		<-r.Context().Done()
		d.mu.Lock()
		return
	}
	body, ok := d.files[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	etag := fmt.Sprintf(`"v%d"`, len(body))
	w.Header().Set("ETag", etag)
	if r.Header.Get("If-None-Match") != "" {
		d.cond[r.URL.Path]++
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	} else {
		d.full[r.URL.Path]++
	}
	fmt.Fprint(w, body)
}

func TestRemoteInputs(t *testing.T) {
	data := &remoteData{full: map[string]int{}, cond: map[string]int{}, files: map[string]string{
		"/datasets/train.csv":         "a,b\n1,2\n",
		"/datasets/cluster.csv":       "on a node\n",
		"/blob/data/mnist/a.csv":      "pixels\n",
		"/blob/data/mnist/sub/b.txt":  "label seven\n",
		"/blob/data/other/no.txt":     "not this\n",
		"/blob/data/single/iris.csv":  "iris\n",
		"/web/datasets/titanic.csv":   "titanic\n",
		"/web/datasets/sub/extra.csv": "extra\n",
	}}
	web := httptest.NewServer(data)
	defer web.Close()
	s := startServerEnv(t, []string{"FERRY_BLOB_ENDPOINTS=ferrytest=" + web.URL + "/blob"})
	url := web.URL + "/datasets/train.csv"

	t.Run("https file downloaded, then a cache hit", func(t *testing.T) {
		job := jobFile(t, "command: cat ${{inputs.train}}\ninputs:\n  train: {type: uri_file, path: '"+url+"'}\n", nil)
		r := s.mustFerry("job", "create", "-f", job, "--name", "fetch-1", "--stream")
		mustContain(t, "first job's log", r.stdout, "a,b\n1,2", "downloading "+url)
		if full, cond := data.counts("/datasets/train.csv"); full != 1 || cond != 0 {
			t.Errorf("after the first job the server saw %d full and %d conditional requests, want 1 and 0", full, cond)
		}
		r = s.mustFerry("job", "create", "-f", job, "--name", "fetch-2", "--stream")
		t.Logf("second job's log:\n%s", r.stdout)
		mustContain(t, "second job's log", r.stdout, "a,b\n1,2", url+": cache hit (not modified")
		if full, cond := data.counts("/datasets/train.csv"); full != 1 || cond != 1 {
			t.Errorf("after the second job the server saw %d full and %d conditional requests, want 1 and 1", full, cond)
		}
	})

	t.Run("a missing URL fails the job at Preparing with the URL and 404", func(t *testing.T) {
		missing := web.URL + "/datasets/missing.csv"
		job := jobFile(t, "command: echo never ran\ninputs:\n  train: {type: uri_file, path: '"+missing+"'}\n", nil)
		r := s.ferry("job", "create", "-f", job, "--name", "fetch-404", "--stream")
		if r.code == 0 {
			t.Fatalf("the job succeeded: %s", r)
		}
		if strings.Contains(r.stdout, "never ran") || strings.Contains(r.stdout, "Traceback") {
			t.Errorf("log:\n%s", r.stdout)
		}
		j := s.show("fetch-404")
		t.Logf("log:\n%s\nerror: %s", r.stdout, j.Error)
		if j.Status != "Failed" {
			t.Fatalf("status %s, want Failed", j.Status)
		}
		mustContain(t, "the job's error", j.Error, "input train", missing, "404 Not Found")
		var states []string
		for _, h := range j.History {
			states = append(states, h.To)
		}
		if len(states) < 2 || states[len(states)-2] != "Preparing" || slices.Contains(states, "Running") {
			t.Errorf("history %v: want it to fail from Preparing, never Running", states)
		}
	})

	t.Run("a cancel stops a download", func(t *testing.T) {
		job := jobFile(t, "command: echo never ran\ninputs:\n  s: {type: uri_file, path: '"+web.URL+"/slow'}\n", nil)
		s.mustFerry("job", "create", "-f", job, "--name", "fetch-slow")
		s.waitStatus("fetch-slow", "Preparing")
		s.mustFerry("job", "cancel", "fetch-slow")
		j := s.waitStatus("fetch-slow", "Canceled", "Failed")
		if j.Status != "Canceled" {
			t.Errorf("a job canceled while its input was fetched is %s (%s), want Canceled", j.Status, j.Error)
		}
	})

	t.Run("wasbs folder through List Blobs", func(t *testing.T) {
		job := jobFile(t, "command: cat ${{inputs.m}}/a.csv ${{inputs.m}}/sub/b.txt ${{inputs.iris}} ${{inputs.one}}/iris.csv && ls -R ${{inputs.m}}\n"+
			"inputs:\n  m: {type: uri_folder, path: 'wasbs://data@ferrytest.blob.core.windows.net/mnist'}\n"+
			"  iris: {type: uri_file, path: 'https://ferrytest.blob.core.windows.net/data/single/iris.csv'}\n"+
			"  one: {type: uri_folder, path: 'wasbs://data@ferrytest.blob.core.windows.net/single/iris.csv'}\n", nil)
		r := s.mustFerry("job", "create", "-f", job, "--name", "blob-1", "--stream")
		t.Logf("log:\n%s", r.stdout)
		mustContain(t, "log", r.stdout, "pixels", "label seven", "2 files (", "iris\niris\n", "is one blob, not a folder")
		if strings.Contains(r.stdout, "no.txt") {
			t.Errorf("a blob outside the folder was fetched:\n%s", r.stdout)
		}
	})

	t.Run("datastores", func(t *testing.T) {
		shared := filepath.Join(passableDir(t), "nfs")
		writeFiles(t, shared, map[string]string{"sets/one/x.txt": "from nfs\n", "sets/one/deep/y.txt": "deep\n", "labels.txt": "lbl\n"})
		if err := filepath.Walk(shared, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			if fi.IsDir() {
				return os.Chmod(p, 0o755)
			}
			return os.Chmod(p, 0o644)
		}); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{
			"nfs.yml": "name: shared\ntype: local_folder\npath: " + shared + "\n",
			"web.yml": "name: web\nurl: " + web.URL + "/web/datasets\n",
			"blob.yml": "$schema: https://azuremlschemas.azureedge.net/latest/azureBlob.schema.json\nname: blobstore\ntype: azure_blob\n" +
				"account_name: ferrytest\ncontainer_name: data\ncredentials:\n  account_key: SECRETKEY123\n",
		})
		for _, f := range []string{"nfs.yml", "web.yml", "blob.yml"} {
			r := s.mustFerry("datastore", "create", "-f", filepath.Join(dir, f))
			if strings.Contains(r.stdout+r.stderr, "SECRETKEY123") {
				t.Errorf("datastore create printed the account key:\n%s", r)
			}
		}
		list := s.mustFerry("datastore", "list").stdout
		mustContain(t, "datastore list", list, "shared", "local_folder", "web", "blobstore", "workspaceblobstore (built in)")
		show := s.mustFerry("datastore", "show", "blobstore", "-o", "json").stdout
		if strings.Contains(show, "SECRETKEY123") {
			t.Errorf("datastore show printed the account key:\n%s", show)
		}

		job := jobFile(t, "command: cat ${{inputs.ro}}/x.txt ${{inputs.ro}}/deep/y.txt ${{inputs.copy}}/x.txt ${{inputs.lbl}} ${{inputs.t}} ${{inputs.b}}/sub/b.txt && echo direct=${{inputs.d}} && test -L ${{inputs.ro}} && test ! -L ${{inputs.copy}} && echo linked-and-copied\n"+
			"inputs:\n"+
			"  ro: {type: uri_folder, path: azureml://datastores/shared/paths/sets/one}\n"+
			"  copy: {type: uri_folder, path: azureml://datastores/shared/paths/sets/one, mode: download}\n"+
			"  lbl: {type: uri_file, path: azureml://datastores/shared/paths/labels.txt}\n"+
			"  t: {type: uri_file, path: azureml://datastores/web/paths/titanic.csv}\n"+
			"  b: {type: uri_folder, path: azureml://datastores/blobstore/paths/mnist}\n"+
			"  d: {type: uri_file, path: azureml://datastores/web/paths/titanic.csv, mode: direct}\n", nil)
		r := s.mustFerry("job", "create", "-f", job, "--name", "ds-1", "--stream")
		t.Logf("log:\n%s", r.stdout)
		mustContain(t, "job show", s.mustFerry("job", "show", "ds-1").stdout,
			"input ro:", "azureml://datastores/shared/paths/sets/one = "+filepath.Join(shared, "sets/one"), "input t:", "= "+web.URL+"/web/datasets/titanic.csv")
		mustContain(t, "log", r.stdout, "from nfs", "deep", "lbl", "titanic", "label seven", "direct="+web.URL+"/web/datasets/titanic.csv", "linked-and-copied")

		// workspaceblobstore, Azure's default, is a folder in the work dir.
		wsb := filepath.Join(s.work, "datastores", "workspaceblobstore")
		writeFiles(t, wsb, map[string]string{"example-data/iris.csv": "iris from the default store\n"})
		if err := os.Chmod(filepath.Join(wsb, "example-data"), 0o755); err != nil {
			t.Fatal(err)
		}
		job = jobFile(t, "command: cat ${{inputs.iris_csv}}\ninputs:\n  iris_csv:\n    type: uri_file\n    path: azureml://datastores/workspaceblobstore/paths/example-data/iris.csv\n", nil)
		mustContain(t, "log", s.mustFerry("job", "create", "-f", job, "--stream").stdout, "iris from the default store")

		// A datastore that does not exist is refused before anything is uploaded.
		bad := jobFile(t, "command: ls\ncode: src\ninputs:\n  x: {type: uri_folder, path: azureml://datastores/nosuch/paths/a}\n", map[string]string{"src/a.py": "print(1)\n"})
		r = s.ferry("job", "create", "-f", bad)
		if r.code == 0 {
			t.Fatalf("a job naming an unknown datastore was accepted: %s", r)
		}
		mustContain(t, "error", r.stderr, "inputs.x.path", "datastore nosuch is not known", "shared")
	})

	t.Run("on a cluster node, cached per node", func(t *testing.T) {
		s.mustFerry("compute", "create", "-f", computeFile(t, `name: remote-cluster
type: amlcompute
size: Standard_DS1_v2
min_instances: 1
max_instances: 1
idle_time_before_scale_down: 600
provider: {type: process}
`))
		s.waitNodes("remote-cluster", 1, "Idle")
		u := web.URL + "/datasets/cluster.csv"
		job := jobFile(t, "command: cat ${{inputs.c}}/cluster.csv\ncompute: azureml:remote-cluster\ninputs:\n  c: {type: uri_folder, path: '"+u+"'}\n", nil)
		r := s.mustFerry("job", "create", "-f", job, "--name", "cl-1", "--stream")
		mustContain(t, "first log", r.stdout, "on a node", "downloading "+u, "a uri_folder input from an http(s) URL is a folder holding the one file cluster.csv")
		r = s.mustFerry("job", "create", "-f", job, "--name", "cl-2", "--stream")
		mustContain(t, "second log", r.stdout, "on a node", u+": cache hit")
		if full, cond := data.counts("/datasets/cluster.csv"); full != 1 || cond != 1 {
			t.Errorf("the server saw %d full and %d conditional requests, want 1 and 1", full, cond)
		}
	})

	t.Run("data asset kept as a reference to a URL", func(t *testing.T) {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{"data.yml": "name: trainurl\ntype: uri_file\npath: " + url + "\n"})
		s.mustFerry("data", "create", "-f", filepath.Join(dir, "data.yml"))
		mustContain(t, "data show", s.mustFerry("data", "show", "trainurl@latest").stdout, url, "kept as a reference")
		job := jobFile(t, "command: cat ${{inputs.t}}\ninputs:\n  t: {type: uri_file, path: azureml:trainurl@latest}\n", nil)
		r := s.mustFerry("job", "create", "-f", job, "--name", "asset-url", "--stream")
		mustContain(t, "log", r.stdout, "a,b\n1,2", "cache hit")
	})
}
