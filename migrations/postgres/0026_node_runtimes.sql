-- The runtime catalogue entries a node can run, as its heartbeat reports
-- them (proto.NodeStatus.Runtimes: agent/catalog names, sorted; '*' for a
-- simulated node, which serves every runtime). Placement puts a version only
-- on nodes that run the entry its runtime needs there. NULL: the node does
-- not say (an agent from before the field), and placement does not filter
-- it; '{}': it runs none.
ALTER TABLE nodes ADD COLUMN runtimes text[];
