// flow.js drives trainflow's ml/v1 API with Node's googleapis client
// (google.ml('v1')), as a Cloud ML Engine user's script does, with only
// the endpoint and the token changed. cli's TestMLAPIGoogleapisNodeClient
// runs it against a dev stack and checks what it prints.
//
// Environment:
//   ML_ROOT_URL   the server's root URL (http://HOST:PORT/)
//   ML_TOKEN      the bearer token sent with every request
//   ML_PROJECT    the project ID of the requests
//   ML_MODEL      the model the training job publishes (projects.predict)
//   ML_INSTANCES  a JSON file holding the instances to predict
//   ML_TIMEOUT_S  how long to wait for a job to end (default 600)
//   ML_PACKAGE_URI  a trainer package (.tar.gz) inside the server's
//                 --ml-package-roots, running trainer.task
//   ML_BATCH_INPUT, ML_BATCH_OUTPUT  a batch prediction's input glob (JSON
//                 lines of the instances) and output directory
//
// It prints one JSON object on stdout: what each call answered. A call
// that fails unexpectedly ends the script with exit status 1 and the
// error on stderr.
'use strict';

const fs = require('fs');
const {google} = require('googleapis');

function env(name) {
  const v = process.env[name];
  if (!v) {
    throw new Error(`${name} is not set`);
  }
  return v;
}

const rootUrl = env('ML_ROOT_URL');
const project = `projects/${env('ML_PROJECT')}`;
const model = env('ML_MODEL');
const instances = JSON.parse(fs.readFileSync(env('ML_INSTANCES'), 'utf8'));
const timeoutMs = 1000 * Number(process.env.ML_TIMEOUT_S || '600');

// The token goes where Google's access token went: every request's
// Authorization header.
const ml = google.ml({
  version: 'v1',
  rootUrl,
  headers: {Authorization: `Bearer ${env('ML_TOKEN')}`},
});

// wait polls projects.jobs.get until the job is in one of the states
// wanted (or any ended state), as a user's script waits for its job.
async function wait(jobId, wanted) {
  const ended = ['SUCCEEDED', 'FAILED', 'CANCELLED'];
  const deadline = Date.now() + timeoutMs;
  const seen = [];
  for (;;) {
    const {data} = await ml.projects.jobs.get({name: `${project}/jobs/${jobId}`});
    if (seen[seen.length - 1] !== data.state) {
      seen.push(data.state);
    }
    if (wanted.includes(data.state) || ended.includes(data.state)) {
      return {job: data, states: seen};
    }
    if (Date.now() > deadline) {
      throw new Error(`job ${jobId}: still ${data.state} after ${timeoutMs} ms`);
    }
    await new Promise(resolve => setTimeout(resolve, 200));
  }
}

// done polls projects.operations.get until the operation is done.
async function done(op) {
  const deadline = Date.now() + timeoutMs;
  while (!op.done) {
    if (Date.now() > deadline) {
      throw new Error(`operation ${op.name}: not done after ${timeoutMs} ms`);
    }
    await new Promise(resolve => setTimeout(resolve, 200));
    op = (await ml.projects.operations.get({name: op.name})).data;
  }
  return op;
}

// refused runs call, which must fail, and returns what the client made
// of the error: its HTTP status and message (googleapis reads Google's
// {"error": {"code", "message", "status"}}).
async function refused(call) {
  try {
    const res = await call();
    return {unexpected: res.data};
  } catch (err) {
    return {code: err.status ?? err.code, message: err.message, body: err.response?.data};
  }
}

async function main() {
  const out = {};
  const created = await ml.projects.jobs.create({
    parent: project,
    requestBody: {
      jobId: 'node_train',
      labels: {client: 'node'},
      trainingInput: {scaleTier: 'BASIC', args: ['--train-steps', '60'], region: 'us-central1', runtimeVersion: '2.11', pythonVersion: '3.7'},
    },
  });
  out.created = created.data;
  const long = await ml.projects.jobs.create({
    parent: project,
    requestBody: {jobId: 'node_long', labels: {client: 'node', kind: 'long'}, trainingInput: {args: ['--train-steps', '100000000']}},
  });
  out.longCreated = long.data;
  out.duplicate = await refused(() => ml.projects.jobs.create({parent: project, requestBody: {jobId: 'node_train', trainingInput: {}}}));
  out.unknownField = await refused(() => ml.projects.jobs.create({parent: project, requestBody: {jobId: 'node_never', trainingInput: {scaleTeir: 'BASIC'}}}));

  // The user's own trainer package, staged as gcloud staged it, and a
  // tuning job whose trials report their metric.
  await ml.projects.jobs.create({
    parent: project,
    requestBody: {jobId: 'node_pkg', trainingInput: {packageUris: [env('ML_PACKAGE_URI')], pythonModule: 'trainer.task', args: ['--x=1'], runtimeVersion: '1.15'}},
  });
  await ml.projects.jobs.create({
    parent: project,
    requestBody: {
      jobId: 'node_tune',
      trainingInput: {
        args: ['--train-steps', '40'],
        hyperparameters: {
          goal: 'MAXIMIZE', hyperparameterMetricTag: 'accuracy', maxTrials: 2, maxParallelTrials: 2,
          params: [{parameterName: 'learning-rate', type: 'DOUBLE', minValue: 0.01, maxValue: 0.2, scaleType: 'UNIT_LOG_SCALE'}],
        },
      },
    },
  });

  const cancelled = await ml.projects.jobs.cancel({name: `${project}/jobs/node_long`, requestBody: {}});
  out.cancel = cancelled.data;
  out.long = await wait('node_long', ['CANCELLED']);
  out.train = await wait('node_train', ['SUCCEEDED']);
  out.pkg = await wait('node_pkg', ['SUCCEEDED']);
  out.tune = await wait('node_tune', ['SUCCEEDED']);

  const list = await ml.projects.jobs.list({parent: project, filter: 'labels.client=node AND state=SUCCEEDED'});
  out.listSucceeded = (list.data.jobs || []).map(j => j.jobId);
  const cancelledList = await ml.projects.jobs.list({parent: project, filter: 'state=CANCELLED'});
  out.listCancelled = (cancelledList.data.jobs || []).map(j => j.jobId);
  out.pages = [];
  let pageToken;
  do {
    const page = await ml.projects.jobs.list({parent: project, filter: 'labels.client=node', pageSize: 1, pageToken});
    out.pages.push((page.data.jobs || []).map(j => j.jobId));
    pageToken = page.data.nextPageToken;
  } while (pageToken && out.pages.length < 10);
  out.badFilter = await refused(() => ml.projects.jobs.list({parent: project, filter: 'state=DONE'}));

  const models = await ml.projects.models.list({parent: project});
  out.models = models.data;
  const got = await ml.projects.models.get({name: `${project}/models/${model}`});
  out.model = got.data;
  const versions = await ml.projects.models.versions.list({parent: `${project}/models/${model}`});
  out.versions = versions.data;
  const version = await ml.projects.models.versions.get({name: got.data.defaultVersion.name});
  out.version = version.data;

  const predicted = await ml.projects.predict({name: `${project}/models/${model}`, requestBody: {instances}});
  out.predict = predicted.data;
  const predictedVersion = await ml.projects.predict({name: got.data.defaultVersion.name, requestBody: {instances}});
  out.predictVersion = predictedVersion.data;
  out.missingJob = await refused(() => ml.projects.jobs.get({name: `${project}/jobs/node_missing`}));

  // A model of the user's own, a version deployed from the training
  // job's export (a long-running operation, polled), and predictions.
  const modelPath = out.train.job.trainingOutput.builtInAlgorithmOutput.modelPath;
  const nodeModel = await ml.projects.models.create({parent: project, requestBody: {name: 'node_model', description: 'from Node', labels: {client: 'node'}}});
  out.modelCreated = nodeModel.data;
  const op = await ml.projects.models.versions.create({parent: `${project}/models/node_model`, requestBody: {name: 'v1', deploymentUri: modelPath, runtimeVersion: '2.11', framework: 'TENSORFLOW'}});
  out.operation = await done(op.data);
  out.nodeModel = (await ml.projects.models.get({name: `${project}/models/node_model`})).data;
  out.predictNodeModel = (await ml.projects.predict({name: `${project}/models/node_model`, requestBody: {instances}})).data;
  out.predictNodeVersion = (await ml.projects.predict({name: `${project}/models/node_model/versions/v1`, requestBody: {instances}})).data;
  out.operations = (await ml.projects.operations.list({name: project})).data;

  // A batch prediction of the version, named as versions.create named it.
  await ml.projects.jobs.create({
    parent: project,
    requestBody: {
      jobId: 'node_batch',
      predictionInput: {dataFormat: 'JSON', inputPaths: [env('ML_BATCH_INPUT')], outputPath: env('ML_BATCH_OUTPUT'),
        versionName: `${project}/models/node_model/versions/v1`, region: 'us-central1'},
    },
  });
  out.batch = await wait('node_batch', ['SUCCEEDED']);
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch(err => {
  console.error(err.response ? `${err.message}: ${JSON.stringify(err.response.data)}` : err.stack || String(err));
  process.exit(1);
});
