/** /debug/pprof over HTTP, as Go's net/http/pprof. Re-exports only. */
export { pprofHandler, type PprofHandler, type PprofHandlerOptions, type NextFunction } from './handler.js';
export { serve, type ServeOptions, type PprofServer } from './serve.js';
