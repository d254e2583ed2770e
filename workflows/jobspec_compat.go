// Code generated for the move of the job-spec contract to package jobspec; DO NOT EDIT.
// /work/spec-rewrite.sh rewrites every caller to jobspec and deletes this file.

package workflows

import "github.com/trainflow/trainflow/jobspec"

const AlgorithmBayesian = jobspec.AlgorithmBayesian
const AlgorithmGrid = jobspec.AlgorithmGrid
const AlgorithmRandom = jobspec.AlgorithmRandom

var BeamArgAllowed = jobspec.BeamArgAllowed

type ClusterSpec = jobspec.ClusterSpec

var ColumnOptions = jobspec.ColumnOptions
var CrossOptions = jobspec.CrossOptions
var DataID = jobspec.DataID
var DataKey = jobspec.DataKey

type DataSpec = jobspec.DataSpec

var DataflowFlags = jobspec.DataflowFlags
var DecodeSpec = jobspec.DecodeSpec

const DefaultBatchMaxBadFraction = jobspec.DefaultBatchMaxBadFraction
const DefaultStallTimeout = jobspec.DefaultStallTimeout
const EnvDocker = jobspec.EnvDocker
const EnvExternal = jobspec.EnvExternal
const EnvLoopback = jobspec.EnvLoopback
const EnvProcess = jobspec.EnvProcess

var ErrInvalidSpec = jobspec.ErrInvalid

type EvalSpec = jobspec.EvalSpec

const ExporterBest = jobspec.ExporterBest
const ExporterFinal = jobspec.ExporterFinal
const ExporterLatest = jobspec.ExporterLatest

type ExporterSpec = jobspec.ExporterSpec

const FormatCSV = jobspec.FormatCSV
const FormatIDX = jobspec.FormatIDX
const FormatJSONL = jobspec.FormatJSONL
const GoalMaximize = jobspec.GoalMaximize
const GoalMinimize = jobspec.GoalMinimize
const HeartbeatTimeout = jobspec.HeartbeatTimeout

var ImageDataDirs = jobspec.ImageDataDirs
var IsDataOf = jobspec.IsDataOf
var IsTransformParam = jobspec.IsTransformParam
var IsTrialOf = jobspec.IsTrialOf

type JobSpec = jobspec.JobSpec

const MaxJobIDLength = jobspec.MaxJobIDLength
const MaxTuningTrials = jobspec.MaxTuningTrials
const ModelLinearClassifier = jobspec.ModelLinearClassifier

type ModelSpec = jobspec.ModelSpec

const ParamCategorical = jobspec.ParamCategorical
const ParamDiscrete = jobspec.ParamDiscrete
const ParamDouble = jobspec.ParamDouble
const ParamInteger = jobspec.ParamInteger

type PredictionSpec = jobspec.PredictionSpec

type RunnerSpec = jobspec.RunnerSpec
type PreprocessResult = jobspec.PreprocessResult

const PresetCensus = jobspec.PresetCensus
const PresetFashionMNIST = jobspec.PresetFashionMNIST
const PresetMNIST = jobspec.PresetMNIST
const PublishNone = jobspec.PublishNone
const RunnerDataflow = jobspec.RunnerDataflow
const RunnerFlink = jobspec.RunnerFlink
const RunnerInProcess = jobspec.RunnerInProcess
const RunnerPortable = jobspec.RunnerPortable
const RunnerSpark = jobspec.RunnerSpark
const RunnerUniversal = jobspec.RunnerUniversal
const ScaleLinear = jobspec.ScaleLinear
const ScaleLog = jobspec.ScaleLog
const ScaleReverseLog = jobspec.ScaleReverseLog

var Secs = jobspec.Secs

type SharedData = jobspec.SharedData

const TierBasic = jobspec.TierBasic
const TierCustom = jobspec.TierCustom
const TierPremium1 = jobspec.TierPremium1
const TierStandard1 = jobspec.TierStandard1

type TrainSpec = jobspec.TrainSpec

var TrialID = jobspec.TrialID
var TunableFields = jobspec.TunableFields
var TuningFlags = jobspec.TuningFlags

const TuningMaximize = jobspec.TuningMaximize
const TuningMinimize = jobspec.TuningMinimize

type TuningParam = jobspec.TuningParam
type TuningSpec = jobspec.TuningSpec

var URISchemes = jobspec.URISchemes

const UpdateAsync = jobspec.UpdateAsync
const UpdateSync = jobspec.UpdateSync

var ValidateJobID = jobspec.ValidateJobID
