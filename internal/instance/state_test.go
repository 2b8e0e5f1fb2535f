package instance

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTransitionTable(t *testing.T) {
	// allowed is the whole machine, written out again so that a change to
	// it shows up here; every pair not listed must be refused.
	allowed := map[State]map[Event]State{
		Creating:    {EvCreated: SettingUp, EvProvisionFailed: Unusable, EvNodeLost: Unusable},
		SettingUp:   {EvSetupOK: Running, EvSetupFailed: SetupFailed, EvNodeLost: Unusable},
		SetupFailed: {EvStop: Stopping, EvRestart: Restarting},
		Running:     {EvJobStarted: JobRunning, EvStop: Stopping, EvRestart: Restarting, EvNodeLost: Unusable},
		JobRunning:  {EvJobStarted: JobRunning, EvJobsDone: Running, EvStop: Stopping, EvRestart: Restarting, EvNodeLost: Unusable},
		Stopping:    {EvStopped: Stopped, EvJobsDone: Stopping, EvNodeLost: Stopped},
		Stopped:     {EvStart: Starting},
		Starting:    {EvStarted: SettingUp, EvProvisionFailed: Unusable, EvNodeLost: Unusable},
		Restarting:  {EvStarted: SettingUp, EvJobsDone: Restarting, EvProvisionFailed: Unusable, EvNodeLost: Unusable},
		Deleting:    {EvJobsDone: Deleting},
		Unusable:    {EvRestart: Restarting, EvJobsDone: Unusable},
	}
	for _, from := range States {
		if from != Deleting {
			allowed[from][EvDelete] = Deleting
		}
		for _, ev := range Events {
			t.Run(fmt.Sprintf("%s/%s", from, ev), func(t *testing.T) {
				got, err := Transition(from, ev)
				want, ok := allowed[from][ev]
				switch {
				case ok && err != nil:
					t.Errorf("refused: %v; want %s", err, want)
				case ok && got != want:
					t.Errorf("went to %s; want %s", got, want)
				case !ok && err == nil:
					t.Errorf("allowed (to %s); want it refused", got)
				case !ok && (got != from || !errors.Is(err, ErrRefused)):
					t.Errorf("refusal = (%s, %v); want (%s, an error wrapping ErrRefused)", got, err, from)
				}
			})
		}
	}
}

func TestTransitionMessages(t *testing.T) {
	tests := []struct {
		from    State
		ev      Event
		want    string
		already bool
	}{
		{Stopped, EvJobStarted, "cannot run a job on a Stopped instance; start it first", false},
		{Stopped, EvRestart, "cannot restart a Stopped instance; start it first", false},
		{Stopped, EvStop, "cannot stop a Stopped instance; it is already stopped", true},
		{Running, EvStart, "cannot start a Running instance; it is already started", true},
		{Restarting, EvRestart, "cannot restart a Restarting instance; it is already restarting", true},
		{Deleting, EvDelete, "cannot delete a Deleting instance; it is being deleted", true},
		{Starting, EvStop, "cannot stop a Starting instance; wait until it is Running", false},
		{Stopping, EvStart, "cannot start a Stopping instance; wait until it is Stopped", false},
		{SetupFailed, EvStart, "cannot start a SetupFailed instance; its setup script failed; read the script's output, fix it, then restart or delete the instance", false},
		{Unusable, EvStart, "cannot start an Unusable instance; its machine was lost or could not be made; restart or delete it", false},
		{Running, EvStopped, "cannot apply stopped to a Running instance; stopped does not apply then", false},
		{"Sleeping", EvStart, "cannot start a Sleeping instance; that is not a state Ferry knows", false},
	}
	for _, tt := range tests {
		_, err := Transition(tt.from, tt.ev)
		if err == nil {
			t.Errorf("Transition(%s, %s) allowed; want %q", tt.from, tt.ev, tt.want)
			continue
		}
		if diff := cmp.Diff(tt.want, err.Error()); diff != "" {
			t.Errorf("Transition(%s, %s) (-want +got):\n%s", tt.from, tt.ev, diff)
		}
		if got := errors.Is(err, ErrAlready); got != tt.already {
			t.Errorf("Transition(%s, %s): errors.Is(err, ErrAlready) = %v, want %v", tt.from, tt.ev, got, tt.already)
		}
		var te *TransitionError
		if !errors.As(err, &te) || te.From != tt.from || te.Event != tt.ev {
			t.Errorf("Transition(%s, %s): error %#v is not a matching *TransitionError", tt.from, tt.ev, err)
		}
	}
	err := fmt.Errorf("instance %s: %w", "dev-box", mustRefuse(t, Stopped, EvJobStarted))
	if got, want := err.Error(), "instance dev-box: cannot run a job on a Stopped instance; start it first"; got != want {
		t.Errorf("wrapped = %q, want %q", got, want)
	}
}

func mustRefuse(t *testing.T, from State, ev Event) error {
	t.Helper()
	_, err := Transition(from, ev)
	if err == nil {
		t.Fatalf("Transition(%s, %s) allowed", from, ev)
	}
	return err
}

// TestLifecycle walks the usual life of an instance through Transition.
func TestLifecycle(t *testing.T) {
	s := Creating
	var got []State
	for _, ev := range []Event{EvCreated, EvSetupOK, EvJobStarted, EvJobStarted, EvJobsDone, EvStop, EvStopped, EvStart, EvStarted, EvSetupOK, EvRestart, EvStarted, EvSetupFailed, EvRestart, EvStarted, EvSetupOK, EvNodeLost, EvDelete} {
		next, err := Transition(s, ev)
		if err != nil {
			t.Fatalf("%s on %s: %v", ev, s, err)
		}
		s = next
		got = append(got, s)
	}
	want := []State{SettingUp, Running, JobRunning, JobRunning, Running, Stopping, Stopped, Starting, SettingUp, Running, Restarting, SettingUp, SetupFailed, Restarting, SettingUp, Running, Unusable, Deleting}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("states (-want +got):\n%s", diff)
	}
}
