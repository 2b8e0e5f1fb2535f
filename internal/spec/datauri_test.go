package spec

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseDataURI(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want DataURI
	}{
		{"./data", DataURI{Kind: URILocal}},
		{"file:./data", DataURI{Kind: URILocal}},
		{"azureml:cifar:1", DataURI{Kind: URIAsset}},
		{"https://example.com/a/b.csv", DataURI{Kind: URIHTTP, URL: "https://example.com/a/b.csv"}},
		{"http://127.0.0.1:8080/x?y=1", DataURI{Kind: URIHTTP, URL: "http://127.0.0.1:8080/x?y=1"}},
		{"wasbs://data@azuremlexamples.blob.core.windows.net/mnist", DataURI{Kind: URIBlob, Account: "azuremlexamples", Container: "data", Host: "azuremlexamples.blob.core.windows.net", Path: "mnist"}},
		{"wasbs://data@azuremlexamples.blob.core.windows.net/", DataURI{Kind: URIBlob, Account: "azuremlexamples", Container: "data", Host: "azuremlexamples.blob.core.windows.net"}},
		{"https://azuremlexamples.blob.core.windows.net/datasets/iris.csv", DataURI{Kind: URIBlob, Account: "azuremlexamples", Container: "datasets", Host: "azuremlexamples.blob.core.windows.net", Path: "iris.csv"}},
		{"https://acct.blob.core.windows.net/c01/x.csv?sv=1&sig=2", DataURI{Kind: URIHTTP, URL: "https://acct.blob.core.windows.net/c01/x.csv?sv=1&sig=2"}},
		{"abfss://fs1@acct.dfs.core.windows.net/a/b/", DataURI{Kind: URIBlob, Account: "acct", Container: "fs1", Host: "acct.dfs.core.windows.net", Path: "a/b"}},
		{"azureml://datastores/workspaceblobstore/paths/data/titanic.csv", DataURI{Kind: URIDatastore, Store: "workspaceblobstore", Path: "data/titanic.csv"}},
		{"azureml://datastores/nfs/paths/", DataURI{Kind: URIDatastore, Store: "nfs"}},
		{"azureml://subscriptions/s/resourcegroups/rg/workspaces/ws/datastores/st/paths/p/q", DataURI{Kind: URIDatastore, Store: "st", Path: "p/q"}},
	} {
		got, err := ParseDataURI(tc.in)
		if err != nil {
			t.Errorf("ParseDataURI(%q): %v", tc.in, err)
			continue
		}
		tc.want.Raw = tc.in
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("ParseDataURI(%q) (-want +got):\n%s", tc.in, d)
		}
	}
}

func TestParseDataURIRefuses(t *testing.T) {
	for in, want := range map[string]string{
		"s3://bucket/x":                            "s3:// paths cannot be read here",
		"azureml://registries/azureml/data/x":      "a registry's asset cannot be read here",
		"azureml://datastores/a b/paths/x":         "not a datastore name",
		"azureml://datastores/st/x":                "write it as azureml://datastores/st/paths/PATH",
		"azureml://datastores/st/paths/../x":       `has a ".." step`,
		"wasbs://acct.blob.core.windows.net/x":     "write it as wasbs://CONTAINER@ACCOUNT",
		"wasbs://c1c@example.com/x":                "is not a storage account's host",
		"wasbs://Bad@acct.blob.core.windows.net/x": "is not a container name",
		"https://acct.blob.core.windows.net/":      "no container",
		"https://user:secret@example.com/x":        "with a user or password",
		"https:///x":                               "has no host",
	} {
		_, err := ParseDataURI(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseDataURI(%q) = %v, want an error with %q", in, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("ParseDataURI(%q) shows the password: %v", in, err)
		}
	}
}

func TestBlobBase(t *testing.T) {
	ep, err := ParseBlobEndpoints("acct=http://127.0.0.1:9/, other=https://mirror.example/x")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range [][3]string{
		{"acct", "acct.blob.core.windows.net", "http://127.0.0.1:9"},
		{"other", "", "https://mirror.example/x"},
		{"third", "third.dfs.core.windows.net", "https://third.blob.core.windows.net"},
	} {
		if got := BlobBase(tc[0], tc[1], ep); got != tc[2] {
			t.Errorf("BlobBase(%s) = %s, want %s", tc[0], got, tc[2])
		}
	}
	if _, err := ParseBlobEndpoints("acct=ftp://x"); err == nil {
		t.Error("ParseEndpoints took an ftp URL")
	}
}

// FuzzParse: any string is parsed or refused without a panic, and what is
// parsed as a container or datastore path stays inside it.
func FuzzParseDataURI(f *testing.F) {
	for _, s := range []string{"./x", "azureml:a:1", "https://h/x", "wasbs://c12@a12.blob.core.windows.net/p/q",
		"azureml://datastores/s/paths/a/b", "abfss://f@a12.dfs.core.windows.net/", "https://a12.blob.core.windows.net/c12/x%2F..%2Fy"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseDataURI(s)
		if err != nil {
			return
		}
		switch u.Kind {
		case URIBlob, URIDatastore:
			for _, seg := range strings.Split(u.Path, "/") {
				if seg == ".." || seg == "." || (seg == "" && u.Path != "") {
					t.Fatalf("ParseDataURI(%q) gave path %q", s, u.Path)
				}
			}
		case URIHTTP:
			if !strings.HasPrefix(strings.ToLower(u.URL), "http") {
				t.Fatalf("ParseDataURI(%q) gave URL %q", s, u.URL)
			}
		}
	})
}
