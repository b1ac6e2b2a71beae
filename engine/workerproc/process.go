package workerproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// process is one running worker: its pipes, the goroutines that reap it
// and copy its stderr to the log, and the last lines of that stderr for
// the error that reports its death.
type process struct {
	cmd    *exec.Cmd
	pid    int
	stdin  *os.File
	stdout *os.File
	fr     frameReader
	enc    encoder
	nextID uint64
	info   string

	exited  chan struct{} // closed once the process is reaped
	waitErr error         // cmd.Wait's, set before exited closes
	pumped  chan struct{} // closed once its stderr is read to the end

	abortOnce sync.Once

	tailMu sync.Mutex
	tail   []string // the last stderrTail lines of stderr
}

// stderrTail is how many of a worker's last stderr lines an error about
// its death quotes.
const stderrTail = 5

// spawn starts the worker process of cfg (its stderr copied to log line by
// line) and runs the handshake, bounded by ctx.
func spawn(ctx context.Context, cfg *Config, log *slog.Logger) (*process, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("worker %s: %w", cfg.Name, err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("worker %s: %w", cfg.Name, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		for _, f := range []*os.File{inR, inW, outR, outW} {
			f.Close()
		}
		return nil, fmt.Errorf("worker %s: %w", cfg.Name, err)
	}
	growPipe(inW)
	growPipe(outW)
	cmd := exec.Command(cfg.Cmd[0], cfg.Cmd[1:]...)
	cmd.Dir = cfg.Dir
	cmd.Env = append(os.Environ(), cfg.Env...)
	cmd.Env = append(cmd.Env, "BATCHD_DEVICE_INDEX="+strconv.Itoa(cfg.Index), "BATCHD_DEVICE_NAME="+cfg.Name)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	setGroup(cmd)
	err = cmd.Start()
	// The child holds its ends now; the parent's copies are closed so that
	// the worker's death is seen as end of file on stdout and stderr.
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("worker %s: start %q: %w", cfg.Name, cfg.Cmd[0], err)
	}
	p := &process{
		cmd: cmd, pid: cmd.Process.Pid, stdin: inW, stdout: outR,
		fr:     frameReader{r: bufio.NewReaderSize(outR, 64<<10), max: cfg.FrameMaxBytes},
		exited: make(chan struct{}), pumped: make(chan struct{}),
	}
	go func() {
		defer close(p.pumped)
		p.pump(errR, cfg, log)
	}()
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	if err := p.handshake(ctx, cfg); err != nil {
		p.abort()
		<-p.exited
		return nil, p.deathError(fmt.Errorf("worker %s: handshake: %w", cfg.Name, err))
	}
	return p, nil
}

func (p *process) handshake(ctx context.Context, cfg *Config) error {
	stop := context.AfterFunc(ctx, p.abort)
	defer stop()
	p.enc.hello(hello{
		VersionMin: ProtocolVersion, VersionMax: ProtocolVersion,
		DeviceIndex: uint32(cfg.Index), DeviceName: cfg.Name,
		BatchMax: uint32(cfg.BatchMax), FrameMax: uint32(cfg.FrameMaxBytes),
	})
	b, err := p.enc.end(cfg.FrameMaxBytes)
	if err != nil {
		return err
	}
	if _, err := p.stdin.Write(b); err != nil {
		return p.ioError(ctx, "writing the hello", err)
	}
	typ, payload, err := p.fr.next()
	if err != nil {
		return p.ioError(ctx, "reading the answer", err)
	}
	ack, err := decodeHelloAck(typ, payload)
	if err != nil {
		return err
	}
	if ack.Version != ProtocolVersion {
		return protocolf("version %d chosen, batchd speaks %d", ack.Version, ProtocolVersion)
	}
	p.info = ack.Info
	return nil
}

// run sends one batch and reads its answer. fault reports that the process
// can no longer be trusted (it died, wrote garbage, or did not answer
// within ctx): the caller kills and restarts it.
func (p *process) run(ctx context.Context, frameMax int, model, version string, inputs []string) (outs []string, itemErrs []error, err error, fault bool) {
	stop := context.AfterFunc(ctx, p.abort)
	defer stop()
	p.nextID++
	id := p.nextID
	p.enc.batch(id, model, version, inputs)
	b, err := p.enc.end(frameMax)
	if err != nil {
		// Too large to send: the batch's fault, not the worker's.
		return nil, nil, err, false
	}
	if _, err := p.stdin.Write(b); err != nil {
		return nil, nil, p.ioError(ctx, "writing the batch", err), true
	}
	typ, payload, err := p.fr.next()
	if err != nil {
		return nil, nil, p.ioError(ctx, "reading the result", err), true
	}
	outs, itemErrs, err = decodeReply(typ, payload, id, len(inputs))
	var be *errBatch
	if err != nil && !errors.As(err, &be) {
		return nil, nil, err, true
	}
	return outs, itemErrs, err, false
}

// ioError explains a failed read or write: the context that ended, or the
// process that exited (with its status), or the error itself.
func (p *process) ioError(ctx context.Context, doing string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%s: no answer in time: %w", doing, cerr)
	}
	if errors.Is(err, errProtocol) {
		return err
	}
	// The worker closed its end: wait (bounded) to learn why.
	select {
	case <-p.exited:
		return fmt.Errorf("%s: worker exited (%s)", doing, exitStatus(p.waitErr))
	case <-time.After(exitWait):
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%s: worker closed its stdout: %w", doing, err)
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// exitWait bounds the wait to learn the exit status of a worker whose
// pipe closed.
const exitWait = 500 * time.Millisecond

func exitStatus(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// deathError adds the last lines of the worker's stderr to err, once the
// stderr is read to its end (bounded: the process group is killed).
func (p *process) deathError(err error) error {
	select {
	case <-p.pumped:
	case <-time.After(exitWait):
	}
	p.tailMu.Lock()
	defer p.tailMu.Unlock()
	if len(p.tail) == 0 {
		return err
	}
	return fmt.Errorf("%w; its last stderr: %s", err, strings.Join(p.tail, " | "))
}

// abort kills the process group and closes batchd's pipe ends, which ends
// any read or write in progress. Safe from any goroutine, more than once.
func (p *process) abort() {
	p.abortOnce.Do(func() {
		killGroup(p.cmd)
		p.stdin.Close()
		p.stdout.Close()
	})
}

// stop ends the process gracefully: its stdin closes, which a worker takes
// as the end; past grace it is killed. It returns once the process is
// reaped (or grace has passed twice).
func (p *process) stop(grace time.Duration) {
	p.stdin.Close()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
	}
	p.abort()
	select {
	case <-p.exited:
	case <-time.After(grace):
	}
	// What it wrote to stderr before it died is logged before stop
	// returns (bounded: a child that kept the pipe open holds it).
	select {
	case <-p.pumped:
	case <-time.After(grace):
	}
}

// alive reports whether the process has not exited.
func (p *process) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// pump copies the worker's stderr to log, one line per record, each cut
// at StderrLineMax bytes and prefixed with the device's name; at most
// StderrLinesPerSecond lines a second are logged, and a count of those left
// out follows.
func (p *process) pump(r *os.File, cfg *Config, log *slog.Logger) {
	defer r.Close()
	br := bufio.NewReaderSize(r, cfg.StderrLineMax)
	prefix := cfg.Name + ": "
	var windowStart time.Time
	logged, dropped := 0, 0
	for {
		line, err := br.ReadSlice('\n')
		text := strings.TrimRight(string(line), "\r\n")
		cut := 0
		for errors.Is(err, bufio.ErrBufferFull) {
			// Too long: keep the first StderrLineMax bytes, skip to the
			// line's end.
			var rest []byte
			rest, err = br.ReadSlice('\n')
			cut += len(rest)
			if err == nil {
				cut-- // the newline
			}
		}
		if len(text) > 0 || cut > 0 {
			if cut > 0 {
				text += " …(" + strconv.Itoa(cut) + " bytes more)"
			}
			p.remember(text)
			now := time.Now()
			if now.Sub(windowStart) >= time.Second {
				if dropped > 0 {
					log.Warn(prefix+"stderr lines left out", "device", cfg.Name, "pid", p.pid, "lines", dropped)
				}
				windowStart, logged, dropped = now, 0, 0
			}
			if logged < cfg.StderrLinesPerSecond {
				logged++
				log.Info(prefix+text, "device", cfg.Name, "pid", p.pid)
			} else {
				dropped++
			}
		}
		if err != nil {
			if dropped > 0 {
				log.Warn(prefix+"stderr lines left out", "device", cfg.Name, "pid", p.pid, "lines", dropped)
			}
			return
		}
	}
}

func (p *process) remember(line string) {
	p.tailMu.Lock()
	defer p.tailMu.Unlock()
	if len(p.tail) == stderrTail {
		copy(p.tail, p.tail[1:])
		p.tail = p.tail[:stderrTail-1]
	}
	p.tail = append(p.tail, line)
}
