package instance

import (
	"errors"
	"fmt"
	"strings"
)

// State is a compute instance's state, named as Azure ML names it.
type State string

// The states Ferry uses (Azure's CreateFailed, UserSettingUp,
// UserSetupFailed and Unknown are folded into Unusable, SettingUp and
// SetupFailed).
const (
	Creating    State = "Creating"    // the node provider is making the machine
	SettingUp   State = "SettingUp"   // the agent is up; setup scripts are running
	SetupFailed State = "SetupFailed" // a setup script failed or timed out
	Running     State = "Running"     // ready and idle or in use, no job
	JobRunning  State = "JobRunning"  // at least one job runs on it
	Stopping    State = "Stopping"    // being stopped
	Stopped     State = "Stopped"     // stopped; its disk is kept
	Starting    State = "Starting"    // being started again
	Restarting  State = "Restarting"  // being stopped and started
	Deleting    State = "Deleting"    // being deleted; the record goes when done
	Unusable    State = "Unusable"    // the machine was lost or could not be made
)

// States lists every state, in the order above.
var States = []State{Creating, SettingUp, SetupFailed, Running, JobRunning, Stopping, Stopped, Starting, Restarting, Deleting, Unusable}

// Event is what happened to an instance, or what someone asked of it.
type Event string

// The events. Start, stop, restart and delete are requests (from the CLI,
// a schedule or the idle timer); the others are reports from the node
// provider, the agent or the scheduler.
const (
	EvCreated         Event = "created"          // the machine exists and its agent connected
	EvSetupOK         Event = "setup_ok"         // the setup scripts finished (or there were none)
	EvSetupFailed     Event = "setup_failed"     // a setup script failed or timed out
	EvStart           Event = "start"            // start a stopped instance
	EvStop            Event = "stop"             // stop it
	EvRestart         Event = "restart"          // stop and start it
	EvJobStarted      Event = "job_started"      // a job began on it
	EvJobsDone        Event = "jobs_done"        // its last running job ended
	EvStopped         Event = "stopped"          // the provider finished stopping it
	EvStarted         Event = "started"          // the provider finished (re)starting it; startup script next
	EvDelete          Event = "delete"           // delete it
	EvNodeLost        Event = "node_lost"        // the machine or its agent went away
	EvProvisionFailed Event = "provision_failed" // the provider could not make or start the machine
)

// Events lists every event.
var Events = []Event{EvCreated, EvSetupOK, EvSetupFailed, EvStart, EvStop, EvRestart, EvJobStarted, EvJobsDone, EvStopped, EvStarted, EvDelete, EvNodeLost, EvProvisionFailed}

// ErrRefused is wrapped by every error Transition returns: the event is not
// allowed in the instance's state. ErrAlready is wrapped as well when the
// instance is already where the request would take it (start on a Running
// instance), which callers may treat as success.
var (
	ErrRefused = errors.New("not allowed in this state")
	ErrAlready = errors.New("already in that state")
)

// TransitionError says why an event is refused in a state. Its message is
// safe to show a user; callers put the instance's name in front:
// fmt.Errorf("instance %s: %w", name, err).
type TransitionError struct {
	From    State
	Event   Event
	Already bool   // the instance is already where the request leads
	Hint    string // what to do instead
}

// Error reads like "cannot restart a Stopped instance; start it first".
func (e *TransitionError) Error() string {
	article := "a"
	if e.From != "" && strings.ContainsRune("AEIOU", rune(e.From[0])) {
		article = "an"
	}
	return fmt.Sprintf("cannot %s %s %s instance; %s", verb(e.Event), article, e.From, e.Hint)
}

// Unwrap returns ErrRefused, and ErrAlready too when Already is set.
func (e *TransitionError) Unwrap() []error {
	if e.Already {
		return []error{ErrRefused, ErrAlready}
	}
	return []error{ErrRefused}
}

func verb(ev Event) string {
	switch ev {
	case EvStart, EvStop, EvRestart, EvDelete:
		return string(ev)
	case EvJobStarted:
		return "run a job on"
	}
	return "apply " + string(ev) + " to"
}

type edge struct {
	from State
	ev   Event
}

// transitions is the whole state machine. Startup scripts run on every
// start, so Starting and Restarting pass through SettingUp as Creating
// does. A user's stop is allowed with jobs running (Azure does the same;
// the caller cancels them); only schedules wait for jobs (see Decide).
var transitions = map[edge]State{
	{Creating, EvCreated}:         SettingUp,
	{Creating, EvProvisionFailed}: Unusable,
	{Creating, EvNodeLost}:        Unusable,

	{SettingUp, EvSetupOK}:     Running,
	{SettingUp, EvSetupFailed}: SetupFailed,
	{SettingUp, EvNodeLost}:    Unusable,

	{Running, EvJobStarted}: JobRunning,
	{Running, EvStop}:       Stopping,
	{Running, EvRestart}:    Restarting,
	{Running, EvNodeLost}:   Unusable,

	{JobRunning, EvJobStarted}: JobRunning,
	{JobRunning, EvJobsDone}:   Running,
	{JobRunning, EvStop}:       Stopping,
	{JobRunning, EvRestart}:    Restarting,
	{JobRunning, EvNodeLost}:   Unusable,

	{Stopping, EvStopped}:  Stopped,
	{Stopping, EvJobsDone}: Stopping, // jobs canceled by the stop end while it stops
	{Stopping, EvNodeLost}: Stopped,  // the machine went away: as good as stopped

	{Stopped, EvStart}: Starting,

	{Starting, EvStarted}:         SettingUp,
	{Starting, EvProvisionFailed}: Unusable,
	{Starting, EvNodeLost}:        Unusable,

	{Restarting, EvStarted}:         SettingUp,
	{Restarting, EvJobsDone}:        Restarting,
	{Restarting, EvProvisionFailed}: Unusable,
	{Restarting, EvNodeLost}:        Unusable,

	{SetupFailed, EvStop}:    Stopping,
	{SetupFailed, EvRestart}: Restarting, // runs the (fixed) startup script again

	{Unusable, EvRestart}:  Restarting,
	{Unusable, EvJobsDone}: Unusable,

	{Deleting, EvJobsDone}: Deleting,
}

// Transition returns the state an instance in state from moves to on ev,
// or a *TransitionError saying why ev is not allowed there. EvDelete is
// allowed from every state but Deleting.
func Transition(from State, ev Event) (State, error) {
	if to, ok := transitions[edge{from, ev}]; ok {
		return to, nil
	}
	if ev == EvDelete && from != Deleting && knownState(from) {
		return Deleting, nil
	}
	return from, refusal(from, ev)
}

func knownState(s State) bool {
	for _, k := range States {
		if k == s {
			return true
		}
	}
	return false
}

func refusal(from State, ev Event) *TransitionError {
	e := &TransitionError{From: from, Event: ev}
	switch {
	case !knownState(from):
		e.Hint = "that is not a state Ferry knows"
	case from == Deleting:
		e.Already = ev == EvDelete
		e.Hint = "it is being deleted"
	case ev == EvStart && (from == Running || from == JobRunning || from == Starting):
		e.Already = true
		e.Hint = "it is already started"
	case ev == EvStop && (from == Stopped || from == Stopping):
		e.Already = true
		e.Hint = "it is already stopped"
	case ev == EvRestart && from == Restarting:
		e.Already = true
		e.Hint = "it is already restarting"
	case from == Stopped && (ev == EvRestart || ev == EvJobStarted):
		e.Hint = "start it first"
	case from == SetupFailed:
		e.Hint = "its setup script failed; read the script's output, fix it, then restart or delete the instance"
	case from == Unusable:
		e.Hint = "its machine was lost or could not be made; restart or delete it"
	case from == Creating || from == SettingUp || from == Starting || from == Restarting:
		e.Hint = "wait until it is Running"
	case from == Stopping:
		e.Hint = "wait until it is Stopped"
	default:
		e.Hint = fmt.Sprintf("%s does not apply then", ev)
	}
	return e
}
