package assets_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/workload/workloadtest"
)

func TestCheckReferences(t *testing.T) {
	ctx := context.Background()
	as := workloadtest.New(t, 1).WS.Assets()
	ps, err := as.CheckReferences(ctx, []apitypes.Reference{
		{Field: "environment", Kind: "environment", Ref: "azureml:nope@latest"},
		{Field: "compute", Kind: "compute", Ref: "azureml:local"},
		{Field: "compute", Kind: "compute", Ref: "azureml:gpu"},
		{Field: "inputs.d.path", Kind: "data", Ref: "azureml:cifar:1"},
		{Field: "inputs.e.path", Kind: "data", Ref: "./local/folder"},
		{Field: "environment", Kind: "environment", Ref: "file:./env.yml"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var fields []string
	for _, p := range ps {
		fields = append(fields, p.Field+" "+p.Ref)
		if p.Message == "" || strings.HasPrefix(p.Message, p.Field+":") {
			t.Errorf("problem %+v: want a message without the field's name in front", p)
		}
	}
	want := []string{"environment azureml:nope@latest", "compute azureml:gpu", "inputs.d.path azureml:cifar:1"}
	if !slices.Equal(fields, want) {
		t.Errorf("problems %v, want %v", fields, want)
	}
	if _, err := as.CheckReferences(ctx, []apitypes.Reference{{Field: "x", Kind: "widget", Ref: "y"}}); apperr.CodeOf(err) != apperr.CodeInvalid {
		t.Errorf("unknown kind: %v, want invalid", err)
	}
}
