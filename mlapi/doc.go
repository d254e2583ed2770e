// Package mlapi serves Cloud ML Engine's ml/v1 REST surface on the
// prediction server's Echo instance, so that the shut-down service's
// clients (Node's googleapis google.ml('v1'), scripts written from the
// REST reference) work with only their endpoint and token changed:
//
//	POST /v1/projects/{project}/jobs                         projects.jobs.create
//	GET  /v1/projects/{project}/jobs                         projects.jobs.list
//	GET  /v1/projects/{project}/jobs/{job}                   projects.jobs.get
//	POST /v1/projects/{project}/jobs/{job}:cancel            projects.jobs.cancel
//	PATCH /v1/projects/{project}/jobs/{job}?updateMask=labels projects.jobs.patch
//	POST /v1/projects/{project}/models/{model}:predict       projects.predict
//	POST /v1/projects/{project}/models/{model}/versions/{v}:predict
//	GET  /v1/projects/{project}/models                       projects.models.list
//	GET  /v1/projects/{project}/models/{model}               projects.models.get
//	GET  /v1/projects/{project}/models/{model}/versions      projects.models.versions.list
//	GET  /v1/projects/{project}/models/{model}/versions/{v}  projects.models.versions.get
//	POST /v1/projects/{project}/models                       projects.models.create
//	PATCH, DELETE /v1/projects/{project}/models/{model}      projects.models.patch, delete
//	POST /v1/projects/{project}/models/{model}/versions      projects.models.versions.create
//	PATCH, DELETE …/versions/{v}; POST …/versions/{v}:setDefault
//	GET  /v1/projects/{project}/operations[/{operation}]     projects.operations.list, get
//
// A Job's trainingInput and predictionInput become a JobSpec or a
// PredictionSpec through package jobs (the one mapping `jobs submit
// training --config` uses), and a job is a Temporal workflow whose ID is
// the job ID: every answer is read from Temporal (the run's state, its
// progress query or result, its memo for labels), never from a store of
// this package's. Predictions answer through the prediction server's own
// :predict path (Predictor), and models and versions are those the
// server has loaded from its repository (Models). A change of a model is
// a ModelOperation workflow a worker makes, as the user who started it
// (the long-running Operation of the reference is that workflow).
//
// Errors are Google's JSON shape, {"error": {"code", "message",
// "status"}}, with a 400 that names the field's JSON path; those of the
// predict methods are Cloud ML Engine's {"error": "..."}, as the server
// they answer through writes them. docs/ml-api.md lists what conforms and
// what deviates.
package mlapi
