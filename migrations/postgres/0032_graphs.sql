-- Inference graphs (docs/decisions.md, "Graphs are models whose versions
-- are definitions"): a graph endpoint is an endpoint of a model of task
-- 'graph', and each graph version is a model version of that model whose
-- runtime is 'graph' and whose definition is in the graph column, so that
-- routing rules, rollouts, the judge and request statistics serve graph
-- versions exactly as they serve model versions. The definition is
-- immutable with the rest of the version (model_versions_immutable covers
-- every column but status).

ALTER TABLE models DROP CONSTRAINT models_task_check;
ALTER TABLE models ADD CONSTRAINT models_task_check
    CHECK (task IN ('classification', 'regression', 'llm', 'graph'));

ALTER TABLE model_versions ADD COLUMN graph jsonb;
ALTER TABLE model_versions ADD CONSTRAINT model_versions_graph_runtime
    CHECK ((runtime = 'graph') = (graph IS NOT NULL));
