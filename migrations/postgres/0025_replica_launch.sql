-- What the node runs for a replica, as its agent reports it in every
-- heartbeat (proto.Launch): the command line the driver executed, its
-- environment with secrets hidden, and the files it generated for the
-- runtime (Triton's config.pbtxt), bounded to a few KiB. The heartbeat
-- intake writes it only when it changed; NULL while the node reported
-- none (the replica has not started, or its driver runs no process, as
-- the simulator's does not).
ALTER TABLE replicas ADD COLUMN launch jsonb;
