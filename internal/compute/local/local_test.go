package local

import (
	"errors"
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/spec"
)

func TestAdmitRefusesWhatOneMachineCannotHonour(t *testing.T) {
	tgt := New(Config{Capacity: 3})
	if tgt.Capacity() != 3 {
		t.Fatalf("capacity %d", tgt.Capacity())
	}
	if New(Config{}).Capacity() < 1 {
		t.Fatal("default capacity must be the CPUs of the machine")
	}
	ok := []*spec.Job{
		{Command: "x"},
		{Command: "x", Resources: &spec.Resources{InstanceCount: 1}},
		{Command: "x", Environment: &spec.Environment{UserManaged: true}},
	}
	for _, j := range ok {
		if err := tgt.Admit(j); err != nil {
			t.Errorf("refused %+v: %v", j, err)
		}
	}
	refused := map[string]*spec.Job{
		"resources.instance_count": {Command: "x", Resources: &spec.Resources{InstanceCount: 2}},
		"resources.instance_type":  {Command: "x", Resources: &spec.Resources{InstanceType: "Standard_NC6"}},
		"distribution":             {Command: "x", Distribution: &spec.Distribution{Type: "pytorch"}},
		"services":                 {Command: "x", Services: map[string]spec.Service{"s": {Type: "ssh"}}},
		"queue_settings.job_tier":  {Command: "x", QueueSettings: &spec.QueueSettings{JobTier: "spot"}},
		"environment":              {Command: "x", Environment: &spec.Environment{Image: "python:3.11"}},
	}
	for field, j := range refused {
		err := tgt.Admit(j)
		if err == nil || !errors.Is(err, compute.ErrNotSupported) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: err %v, want ErrNotSupported naming the field", field, err)
		}
	}
}
