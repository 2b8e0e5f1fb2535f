package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A pipeline step that runs a pipeline component file (in a folder of its
// own, naming a command component beside it and local data relative to
// it) runs as the component's steps, and the next step reads what they
// made.
func TestPipelineComponentFileRuns(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"words/w.txt": "kiwi\n",
		"parts/stage.yml": `$schema: https://azuremlschemas.azureedge.net/latest/pipelineComponent.schema.json
type: pipeline
inputs:
  src: {type: uri_folder}
  tag: {type: string, default: plain}
  note: {type: string, optional: true}
outputs:
  done: {type: uri_folder}
jobs:
  copy:
    type: command
    component: ./copy.yml
    inputs:
      from: ${{parent.inputs.src}}
      tag: ${{parent.inputs.tag}}
      more: ${{parent.inputs.extra_words}}
  mark:
    command: cat ${{inputs.got}}/w.txt ${{inputs.extra}}/e.txt > ${{outputs.out}}/w.txt
    inputs:
      got: ${{parent.jobs.copy.outputs.to}}
      extra: {type: uri_folder, path: ./extra}
    outputs:
      out: ${{parent.outputs.done}}
`,
		"parts/extra/e.txt": "fig\n",
		"parts/copy.yml": `name: copy_words
type: command
inputs:
  from: {type: uri_folder}
  tag: {type: string}
  more: {type: string, optional: true}
outputs:
  to: {type: uri_folder}
command: cp ${{inputs.from}}/w.txt ${{outputs.to}}/ && echo tag=${{inputs.tag}}
`,
		"whole.yml": `type: pipeline
compute: local
inputs:
  src: {type: uri_folder, path: ./words}
component: ./parts/stage.yml
`,
		"pipe.yml": `type: pipeline
compute: local
inputs:
  words: {type: uri_folder, path: ./words}
jobs:
  stage:
    type: pipeline
    component: ./parts/stage.yml
    inputs:
      src: ${{parent.inputs.words}}
  show:
    command: cat ${{inputs.d}}/w.txt
    inputs:
      d: ${{parent.jobs.stage.outputs.done}}
`,
	})
	// parts/stage.yml binds an input it does not declare: the file is
	// refused, naming the field.
	r := s.ferry(t, "job", "create", "-f", filepath.Join(dir, "pipe.yml"))
	if r.code == 0 || !strings.Contains(r.stderr, "extra_words") {
		t.Fatalf("an undeclared input of a pipeline component: %s", r)
	}
	stage, err := os.ReadFile(filepath.Join(dir, "parts", "stage.yml"))
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"parts/stage.yml": strings.Replace(string(stage), "${{parent.inputs.extra_words}}", "${{parent.inputs.note}}", 1)})

	r = s.ferry(t, "job", "create", "-f", filepath.Join(dir, "pipe.yml"), "--stream")
	if r.code != 0 {
		t.Fatalf("pipeline with a pipeline component: %s", r)
	}
	for _, want := range []string{"[stage-copy] tag=plain", "[show] kiwi\n[show] fig\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the log lacks %q: %s", want, r)
		}
	}
	for _, want := range []string{"step stage-copy: Completed", "step stage-mark: Completed", "(all 3 steps completed)"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the progress lacks %q: %s", want, r)
		}
	}

	// A job that is the pipeline component itself: its steps keep their
	// names.
	r = s.ferry(t, "job", "create", "-f", filepath.Join(dir, "whole.yml"), "--stream")
	if r.code != 0 || !strings.Contains(r.stdout, "[copy] tag=plain") || !strings.Contains(r.stderr, "step mark: Completed") || !strings.Contains(r.stderr, "(all 2 steps completed)") {
		t.Errorf("a pipeline job of one pipeline component: %s", r)
	}
}

// A component's additional_includes (a folder and a file, relative to the
// component file) join its code at the root, under their own names; a
// name the code has already is refused.
func TestComponentAdditionalIncludes(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"comp/src/main.sh":        "cat shared/words.txt notes.txt\n",
		"common/shared/words.txt": "pear\n",
		"common/notes.txt":        "plum\n",
		"comp/step.yml": `name: with_includes
type: command
code: ./src
additional_includes:
  - ../common/shared
  - ../common/notes.txt
command: sh main.sh
`,
		"comp/clash.yml": `name: clash
type: command
code: ./src
additional_includes:
  - ./src/main.sh
command: sh main.sh
`,
		"pipe.yml": `type: pipeline
compute: local
jobs:
  run:
    component: ./comp/step.yml
`,
		"clash.yml": `type: pipeline
compute: local
jobs:
  run:
    component: ./comp/clash.yml
`,
	})
	r := s.ferry(t, "job", "create", "-f", filepath.Join(dir, "pipe.yml"), "--stream")
	if r.code != 0 || !strings.Contains(r.stdout, "[run] pear\n[run] plum\n") {
		t.Errorf("a component with additional_includes: %s", r)
	}
	r = s.ferry(t, "job", "create", "-f", filepath.Join(dir, "clash.yml"))
	if r.code == 0 || !strings.Contains(r.stderr, "additional_includes[0]") || !strings.Contains(r.stderr, "main.sh") {
		t.Errorf("an include that clashes with the code: %s", r)
	}
}

// A sweep whose trial is a component file takes the component's
// additional_includes into the trial's code: a trial that reads one
// completes.
func TestSweepTrialAdditionalIncludes(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"comp/src/run.sh":       "test \"$(cat extra/word.txt)\" = fig && echo lr=$1\n",
		"shared/extra/word.txt": "fig\n",
		"comp/train.yml": `name: trial_with_includes
type: command
inputs:
  lr: {type: number}
code: ./src
additional_includes:
  - ../shared/extra
command: sh run.sh ${{inputs.lr}}
`,
		"sweep.yml": `type: sweep
trial: ./comp/train.yml
compute: local
inputs:
  lr: ${{search_space.lr}}
sampling_algorithm: grid
search_space:
  lr: {type: choice, values: [0.5]}
objective: {primary_metric: acc, goal: maximize}
`,
	})
	r := s.ferry(t, "job", "create", "-f", filepath.Join(dir, "sweep.yml"), "--stream")
	if r.code != 0 || !strings.Contains(r.stderr, "code: uploaded 2 files") {
		t.Errorf("a sweep whose trial component has additional_includes: %s", r)
	}
}
