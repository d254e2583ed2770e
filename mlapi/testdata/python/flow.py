#!/usr/bin/python3
"""flow.py drives trainflow's ml/v1 API with Python's discovery client
(googleapiclient, Debian's python3-googleapi), as a Cloud ML Engine user's
script does, with only the discovery URL and the token changed. cli's
TestMLAPIPythonDiscoveryClient runs it against a dev stack and checks what
it prints.

The client is built from the discovery document the server serves at
ROOT/discovery/v1/apis/ml/v1/rest, fetched with the token: googleapiclient
1.7.12's build() fetches the document through the http it is given, or
through a bare httplib2.Http when given only credentials= (so the fetch
would carry no token), so the credentials go in an authorized http
(google_auth_httplib2.AuthorizedHttp), which sends the token on every
request, the discovery fetch included.

Environment:
  ML_ROOT_URL   the server's root URL (http://HOST:PORT/)
  ML_TOKEN      the bearer token sent with every request
  ML_PROJECT    the project ID of the requests
  ML_TIMEOUT_S  how long to wait for a job to end (default 600)

It prints one JSON object on stdout: what each call answered. A call that
fails unexpectedly ends the script with exit status 1 and the error on
stderr.
"""

import json
import os
import sys
import time
import traceback

import google.oauth2.credentials
import google_auth_httplib2
from googleapiclient import discovery, errors

ENDED = ('SUCCEEDED', 'FAILED', 'CANCELLED')


def env(name):
    v = os.environ.get(name)
    if not v:
        raise RuntimeError(name + ' is not set')
    return v


ROOT = env('ML_ROOT_URL')
PROJECT = 'projects/' + env('ML_PROJECT')
TIMEOUT_S = float(os.environ.get('ML_TIMEOUT_S') or '600')


def client():
    """The ml v1 client, built as a Cloud ML Engine user builds it, the
    token where Google's access token went."""
    creds = google.oauth2.credentials.Credentials(env('ML_TOKEN'))
    http = google_auth_httplib2.AuthorizedHttp(creds)
    return discovery.build(
        'ml', 'v1', http=http, cache_discovery=False,
        discoveryServiceUrl=ROOT + 'discovery/v1/apis/{api}/{apiVersion}/rest')


def wait(jobs, job_id, wanted):
    """Polls projects.jobs.get until the job is in a state of wanted (or
    any ended state), as a user's script waits for its job."""
    deadline = time.monotonic() + TIMEOUT_S
    seen = []
    while True:
        job = jobs.get(name=PROJECT + '/jobs/' + job_id).execute()
        if not seen or seen[-1] != job['state']:
            seen.append(job['state'])
        if job['state'] in wanted or job['state'] in ENDED:
            return {'job': job, 'states': seen}
        if time.monotonic() > deadline:
            raise RuntimeError('job %s: still %s after %s s' % (job_id, job['state'], TIMEOUT_S))
        time.sleep(0.2)


def refused(call):
    """Runs call, which must fail with an HttpError, and returns what the
    client made of it: the HTTP status and Google's error object."""
    try:
        return {'unexpected': call()}
    except errors.HttpError as e:
        try:
            body = json.loads(e.content.decode('utf-8'))
        except ValueError:
            body = {'unparsed': e.content.decode('utf-8', 'replace')}
        return {'status': e.resp.status, 'reason': e._get_reason(), 'error': body.get('error'), 'body': body}


def main():
    ml = client()
    jobs = ml.projects().jobs()
    out = {}
    out['created'] = jobs.create(parent=PROJECT, body={
        'jobId': 'py_train',
        'labels': {'client': 'python'},
        'trainingInput': {'scaleTier': 'BASIC', 'args': ['--train-steps', '60']},
    }).execute()
    out['longCreated'] = jobs.create(parent=PROJECT, body={
        'jobId': 'py_long',
        'labels': {'client': 'python', 'kind': 'long'},
        'trainingInput': {'scaleTier': 'BASIC', 'args': ['--train-steps', '100000000']},
    }).execute()
    out['duplicate'] = refused(lambda: jobs.create(parent=PROJECT, body={
        'jobId': 'py_train', 'trainingInput': {'scaleTier': 'BASIC'}}).execute())

    # jobs.patch while py_long runs: read, then send its etag back with
    # the new labels (read-modify-write).
    long_name = PROJECT + '/jobs/py_long'
    running = wait(jobs, 'py_long', ['RUNNING'])
    out['beforePatch'] = running['job']
    out['patched'] = jobs.patch(name=long_name, updateMask='labels', body={
        'labels': {'client': 'python', 'kind': 'long', 'owner': 'alice'},
        'etag': running['job']['etag'],
    }).execute()
    out['afterPatch'] = jobs.get(name=long_name).execute()

    out['cancel'] = jobs.cancel(name=long_name, body={}).execute()
    out['long'] = wait(jobs, 'py_long', ['CANCELLED'])
    out['train'] = wait(jobs, 'py_train', ['SUCCEEDED'])

    listed = jobs.list(parent=PROJECT, filter='labels.client=python').execute()
    out['list'] = sorted(j['jobId'] for j in listed.get('jobs', []))
    out['listLabels'] = {j['jobId']: j.get('labels', {}) for j in listed.get('jobs', [])}
    sys.stdout.write(json.dumps(out) + '\n')


if __name__ == '__main__':
    try:
        main()
    except errors.HttpError as e:
        sys.stderr.write('HttpError %s: %s\n%s' % (e.resp.status, e.content.decode('utf-8', 'replace'), traceback.format_exc()))
        sys.exit(1)
    except Exception:
        traceback.print_exc()
        sys.exit(1)
