/** `mimalloc-pprof/test`: memory budgets for tests (node:test or any runner). */
export { memoryBudget, bytesOf, type MemoryLimits, type MemoryUsed } from './budget.js';
