package workflows

// TaskQueue is the task queue trainflow workers poll.
const TaskQueue = "trainflow"

// RoleTaskQueue is where distributed-training roles (parameter servers and
// workers) are scheduled: each worker process polls it with its own bound
// on concurrent roles, so that a job's roles spread over processes.
const RoleTaskQueue = "trainflow-roles"
