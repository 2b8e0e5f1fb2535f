package spec

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseDatastoreAzureBlob(t *testing.T) {
	f, err := ParseDatastore([]byte(`$schema: https://azuremlschemas.azureedge.net/latest/azureBlob.schema.json
name: blob_example
type: azure_blob
description: Datastore pointing to a blob container.
account_name: mytestblobstore
container_name: data-container
credentials:
  account_key: XXXxxxXXXxXXXXxxXXXXXxXXXXXX
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &DatastoreFile{Schema: "https://azuremlschemas.azureedge.net/latest/azureBlob.schema.json", Name: "blob_example",
		Type: "azure_blob", Description: "Datastore pointing to a blob container.", AccountName: "mytestblobstore",
		ContainerName: "data-container", Endpoint: "core.windows.net", Credentials: map[string]string{"account_key": "XXXxxxXXXxXXXXxxXXXXXxXXXXXX"}}
	if d := cmp.Diff(want, f); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if got := f.CredentialNames(); !cmp.Equal(got, []string{"account_key"}) {
		t.Errorf("CredentialNames = %v", got)
	}
}

func TestParseDatastoreFerryForms(t *testing.T) {
	f, err := ParseDatastore([]byte("name: shared\npath: /mnt/nfs/data\n"), nil)
	if err != nil || f.Type != "local_folder" {
		t.Fatalf("%+v, %v", f, err)
	}
	f, err = ParseDatastore([]byte("name: web\nurl: https://example.com/datasets\n"), nil)
	if err != nil || f.Type != "http" {
		t.Fatalf("%+v, %v", f, err)
	}
	if _, err := ParseDatastore([]byte("name: gen2\ntype: azure_data_lake_gen2\naccount_name: lake01\nfilesystem: fs\n"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseDatastore([]byte("name: files\ntype: azure_file\naccount_name: files01\nfile_share_name: share\n"), nil); err != nil {
		t.Fatal(err)
	}
}

func TestParseDatastoreErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, field, want string }{
		{"no name", "type: local_folder\npath: /x\n", "name", "needs a name"},
		{"no type", "name: a\n", "type", "say what the datastore is"},
		{"relative path", "name: a\npath: ./x\n", "path", "not an absolute path"},
		{"bad url", "name: a\ntype: http\nurl: ftp://x\n", "url", "not an http(s) URL"},
		{"blob without container", "name: a\ntype: azure_blob\naccount_name: acct01\n", "container_name", "needs container_name"},
		{"path on blob", "name: a\ntype: azure_blob\naccount_name: acct01\ncontainer_name: c\npath: /x\n", "path", "does not apply to type azure_blob"},
		{"bad type", "name: a\ntype: s3\n", "type", "not a datastore type"},
		{"unknown field", "name: a\npath: /x\nbucket: b\n", "bucket", "unknown field"},
		{"bad account", "name: a\ntype: azure_blob\naccount_name: My_Acct\ncontainer_name: c\n", "account_name", "not a storage account name"},
	} {
		_, err := ParseDatastore([]byte(tc.yaml), nil)
		es, ok := err.(Errors)
		if !ok {
			t.Errorf("%s: err = %v, want Errors", tc.name, err)
			continue
		}
		found := false
		for _, e := range es {
			if e.Field == tc.field && strings.Contains(e.Message, tc.want) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: %v; want %s: ...%s...", tc.name, err, tc.field, tc.want)
		}
	}
}

// Azure's other datastore files load, so a user can bring them; inputs
// cannot read these types (the workspace says so).
func TestParseDatastoreAzureOthers(t *testing.T) {
	for _, y := range []string{
		"$schema: https://azuremlschemas.azureedge.net/latest/azureDataLakeGen1.schema.json\nname: adls-gen1-example\ntype: azure_data_lake_gen1\nstore_name: mytestdatalakegen1\ncredentials:\n  tenant_id: X\n  client_id: Y\n  client_secret: Z\n",
		"$schema: http://azureml/sdk-2-0/OneLakeDatastore.json\nname: onelake_example_id\ntype: one_lake\ndescription: d\none_lake_workspace_name: \"AzureML_Sample_OneLakeWS\"\nendpoint: \"msit-onelake.dfs.fabric.microsoft.com\"\nartifact:\n  type: lake_house\n  name: \"AzML_Sample_LH\"\n",
		"name: blob_protocol_example\ntype: azure_blob\naccount_name: mytestblobstore\nprotocol: wasbs\ncontainer_name: data-container\ncredentials:\n  account_key: XXX\n",
		"name: adls_gen2_example\ntype: azure_data_lake_gen2\naccount_name: mytestdatalakegen2\nfilesystem: my-gen2-container\ncredentials:\n  tenant_id: X\n  client_id: Y\n  client_secret: Z\n",
	} {
		if _, err := ParseDatastore([]byte(y), nil); err != nil {
			t.Errorf("%v\n%s", err, y)
		}
	}
}
