-- 0007_jobs_queue: the dispatcher asks, for one compute, for its first few
-- queued jobs by priority, then submit order (ListJobs with ByPriority and a
-- Limit). With this index SQLite walks just those rows in order instead of
-- sorting every queued job of the compute on each pass.
CREATE INDEX jobs_queue ON jobs (compute, status, priority DESC, seq);
