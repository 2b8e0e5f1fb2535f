-- 0008_jobs_handle: the engine handle of a job's current attempt (a Slurm
-- job id, a Kubernetes object name): what its compute target's Launch
-- returned, so that a server started again can still inspect or cancel it.
-- '' when the target has no engine-side name for the attempt, or none was
-- launched yet.
ALTER TABLE jobs ADD COLUMN handle TEXT NOT NULL DEFAULT '';

-- The dispatcher reads, per compute, the queued jobs not yet handed to an
-- engine (handle = ''); jobs waiting in a self-queueing engine's own queue
-- are Queued too and may be many. With handle in the index before the
-- order columns, that read still walks just the rows it returns.
DROP INDEX jobs_queue;
CREATE INDEX jobs_queue ON jobs (compute, status, handle, priority DESC, seq);
