// Package app runs the user's own training program ("application") for a
// trainflow job: one process per replica (chief, workers, parameter
// servers, evaluator), told its role the way Cloud ML Engine told it.
//
// # Trust
//
// A job spec never names a command. The worker's operator registers
// applications in a JSON file (worker and dev flag --applications FILE,
// ParseRegistry); a spec names one and gives args, which are appended to
// the registered argv prefix as argv elements: no shell ever parses them.
// The program's environment is built from scratch (Env): the worker's own
// environment (its credentials) is not inherited, except the variables
// the operator lists for the application (Application.Env).
//
// # The registry file
//
//	{"applications": {
//	  "torch_census": {
//	    "argv": ["/usr/bin/python3", "/srv/trainers/torch_census/trainer.py"],
//	    "dir": "/srv/trainers/torch_census",
//	    "env": ["OMP_NUM_THREADS"],
//	    "sandbox": false,
//	    "tf_config_chief": "chief"
//	  }}}
//
// argv[0] must be an absolute path; a relative dir is relative to the
// file's directory, and dir defaults to the replica's workspace.
// tf_config_chief is "chief" (default) or "master", the name Cloud ML
// Engine's older runtime versions gave the chief in TF_CONFIG (for
// programs that look for it). Unknown keys are an error.
//
// # The replica's environment (Env)
//
//	TF_CONFIG                the cluster and this task (TFConfig)
//	MASTER_ADDR, MASTER_PORT the chief's host and port (PyTorch rendezvous)
//	WORLD_SIZE, RANK         chief + workers; the chief is rank 0, worker i
//	                         rank i+1 (parameter servers and the evaluator
//	                         get neither)
//	LOCAL_RANK               0: one process per replica
//	AIP_MODEL_DIR            where the artifact goes (job dir model/)
//	AIP_CHECKPOINT_DIR       where checkpoints go (job dir app/checkpoints/);
//	                         a restarted replica resumes from there
//	AIP_TENSORBOARD_LOG_DIR  TensorBoard event files (job dir logs/app/)
//	CLOUD_ML_HP_METRIC_FILE  the cloudml-hypertune metrics file (ReadMetrics)
//	CLOUD_ML_JOB_ID, TRAINFLOW_JOB_ID      the job ID
//	CLOUD_ML_TRIAL_ID, TRAINFLOW_TRIAL_ID  the tuning trial ("" outside tuning)
//	TRAINFLOW_REPLICA        the replica's name (Task.Name: chief-0, worker-1)
//	HOME, TMPDIR             the replica's workspace
//	PATH                     /usr/local/bin:/usr/bin:/bin unless passed through
//	LANG                     C.UTF-8; PYTHONUNBUFFERED 1 (logs arrive as written)
//
// # TF_CONFIG
//
// The seeds' format, one line of JSON:
//
//	{"cluster":{"chief":["h:p"],"worker":["h:p",…],"ps":["h:p",…]},
//	 "task":{"type":"worker","index":0,"trial":""},
//	 "job":{"scale_tier":…,"worker_count":…,"parameter_server_count":…,
//	        "application":…,"args":[…],"job_dir":…},
//	 "environment":"cloud"}
//
// Empty roles are left out of "cluster"; the evaluator is never in it
// (tf.estimator refuses a cluster that lists one) but gets task type
// "evaluator". "job" is the job's training input as Cloud ML Engine put
// it there (its TrainingInput, snake_case; a package job's package_uris
// and python_module in place of application, and region, runtime_version
// and python_version as submitted): see JobInfo. The job's ID is not in
// it, as it was not in Cloud ML Engine's (CLOUD_ML_JOB_ID is).
//
// # Processes (Start, Process)
//
// Each program runs in its own process group; stdout and stderr go, in
// order, to one size-capped log file (jobdir.AppLogFile). Stop sends
// SIGTERM to the group, then SIGKILL after a grace period, and waits.
//
// # Exit codes (Exit.Retryable)
//
//	0                         success
//	killed by a signal        lost replica: retryable (its generation restarts)
//	                          (also 128+SIGKILL, 128+SIGTERM from a wrapper shell)
//	75 (EX_TEMPFAIL)          the program asks to be restarted: retryable
//	any other code            the user's error: the job fails, not retried,
//	                          with the tail of the program's own log
//
// # Sandboxes and packages (Wrapper)
//
// A Wrapper rewrites a replica's Command just before Start: the worker
// calls it for an application registered with "sandbox": true
// (activities.Activities.AppSandbox, worker.Config.AppSandbox). It gets
// the whole command (argv, working directory, the environment built by
// Env, the log file, and Writable: the Replica's ModelDir,
// CheckpointDir, TensorBoardDir and Workspace, which must stay writable to
// the program) and returns the command to run instead, e.g. the sandbox's
// argv followed by the original one; it must keep Log and LogBytes, and
// may set Terminate (how Stop reaches the program inside: SIGTERM to a
// bwrap process would end the sandbox without grace). Start then runs the
// result in its own process group, so Stop's SIGKILL ends the sandbox and
// everything in it. ReadOnly lists what the program reads (its registered
// directory and script, a package's virtual environment). *Sandbox is the
// Wrapper the worker uses (Sandbox.Wrap).
//
// A package job (Install, ModuleArgv) runs `<venv>/bin/python -m MODULE`
// of the job's own package, installed per replica, through the same
// Wrapper: see docs/sandbox.md.
//
// # Metrics (ReadMetrics)
//
// The cloudml-hypertune file format: JSON lines such as
//
//	{"global_step": "1000", "accuracy": "0.987", "timestamp": 1525851440.1, "trial": "0"}
//
// Values may be strings or numbers; every key besides global_step,
// timestamp, trial and checkpoint_path is a metric tag.
//
// Reports follows a replica's reports for its progress: the metrics file,
// or, while it has no line, the TensorBoard event files of the log dir
// (read with tfevents.Tail); Curve is one tag's curve from the same
// sources, for early stopping.
package app
