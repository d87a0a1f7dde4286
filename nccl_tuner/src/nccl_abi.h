// NCCL's tuner plugin ABI, written from the published layout (no NCCL header is used):
// ncclTuner_v2_t .. ncclTuner_v6_t, the v5 NVL-domain info and constants. Plain C types only.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int poolrunNcclResult;  // ncclResult_t: ncclSuccess = 0
enum { kPoolrunNcclSuccess = 0 };

// ncclDebugLogLevel
enum { kPoolrunLogNone = 0, kPoolrunLogVersion = 1, kPoolrunLogWarn = 2, kPoolrunLogInfo = 3 };
// ncclDebugLogSubSys
enum { kPoolrunLogInit = 0x1, kPoolrunLogTuning = 0x40, kPoolrunLogEnv = 0x80 };
#define POOLRUN_LOG_ALL (~0UL)

typedef void (*poolrunNcclLogger)(int level, unsigned long flags, const char* file, int line, const char* fmt,
                                  ...);

#define POOLRUN_NCCL_ALGOS 7
#define POOLRUN_NCCL_PROTOS 3
#define POOLRUN_NCCL_HW_LINKS 3
#define POOLRUN_NCCL_COMPCAPS 4
#define POOLRUN_NCCL_TUNING_SCALES 3

typedef struct {
  int nNvlDomains;
  int minRanksPerNvlDomain;
  int maxRanksPerNvlDomain;
} poolrunNvlDomainInfoV5;

typedef struct {
  double baseLatencies[POOLRUN_NCCL_ALGOS][POOLRUN_NCCL_PROTOS];
  double hwLatencies[POOLRUN_NCCL_HW_LINKS][POOLRUN_NCCL_ALGOS][POOLRUN_NCCL_PROTOS];
  double llMaxBws[POOLRUN_NCCL_COMPCAPS][POOLRUN_NCCL_TUNING_SCALES];
  double perChMaxRingLL128Bws[POOLRUN_NCCL_COMPCAPS][POOLRUN_NCCL_TUNING_SCALES];
  double perChMaxTreeLL128Bws[POOLRUN_NCCL_COMPCAPS][POOLRUN_NCCL_TUNING_SCALES];
  double perChMaxTreeBws[POOLRUN_NCCL_COMPCAPS][POOLRUN_NCCL_TUNING_SCALES];
  double perChMaxNVLSTreeBws[POOLRUN_NCCL_COMPCAPS][POOLRUN_NCCL_TUNING_SCALES];
} poolrunTunerConstantsV5;

typedef struct {
  const char* name;
  poolrunNcclResult (*init)(size_t nRanks, size_t nNodes, poolrunNcclLogger logFunction, void** context);
  poolrunNcclResult (*getCollInfo)(void* context, int collType, size_t nBytes, int collNetSupport,
                                   int nvlsSupport, int numPipeOps, int* algorithm, int* protocol,
                                   int* nChannels);
  poolrunNcclResult (*destroy)(void* context);
} poolrunTunerV2;

typedef struct {
  const char* name;
  poolrunNcclResult (*init)(size_t nRanks, size_t nNodes, poolrunNcclLogger logFunction, void** context);
  poolrunNcclResult (*getCollInfo)(void* context, int collType, size_t nBytes, int numPipeOps,
                                   float** collCostTable, int numAlgo, int numProto, int* nChannels);
  poolrunNcclResult (*destroy)(void* context);
} poolrunTunerV3;

typedef struct {
  const char* name;
  poolrunNcclResult (*init)(size_t nRanks, size_t nNodes, poolrunNcclLogger logFunction, void** context);
  poolrunNcclResult (*getCollInfo)(void* context, int collType, size_t nBytes, int numPipeOps,
                                   float** collCostTable, int numAlgo, int numProto, int regBuff,
                                   int* nChannels);
  poolrunNcclResult (*destroy)(void* context);
} poolrunTunerV4;

typedef struct {
  const char* name;
  poolrunNcclResult (*init)(void** context, uint64_t commId, size_t nRanks, size_t nNodes,
                            poolrunNcclLogger logFunction, poolrunNvlDomainInfoV5* nvlDomainInfo,
                            poolrunTunerConstantsV5* constants);
  poolrunNcclResult (*getCollInfo)(void* context, int collType, size_t nBytes, int numPipeOps,
                                   float** collCostTable, int numAlgo, int numProto, int regBuff,
                                   int* nChannels);
  poolrunNcclResult (*finalize)(void* context);
} poolrunTunerV5;

typedef struct {
  const char* name;
  poolrunNcclResult (*init)(void** context, uint64_t commId, size_t nRanks, size_t nNodes,
                            poolrunNcclLogger logFunction, poolrunNvlDomainInfoV5* nvlDomainInfo,
                            poolrunTunerConstantsV5* constants);
  poolrunNcclResult (*getCollInfo)(void* context, int collType, size_t nBytes, int numPipeOps,
                                   float** collCostTable, int numAlgo, int numProto, int regBuff,
                                   int* nChannels);
  poolrunNcclResult (*finalize)(void* context);
  poolrunNcclResult (*getChunkSize)(void* context, int collType, size_t nBytes, int algo, int proto,
                                    int nChannels, size_t* chunkSize);
} poolrunTunerV6;

#ifdef __cplusplus
}
#endif
