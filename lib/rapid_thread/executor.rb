# frozen_string_literal: true

module RapidThread
  # Raised by Executor#post under the :abort fallback policy when
  # concurrent-ruby is not loaded (with it, Concurrent::RejectedExecutionError).
  class RejectedExecutionError < StandardError; end

  # A thread pool with concurrent-ruby's executor interface, whose workers
  # run on the thread cache (RapidThread.spawn) and take their tasks from a
  # RapidThread::Queue. `require "rapid_thread/concurrent"` makes it a
  # Concurrent::ExecutorService, which Promises, Future and the global
  # executors accept.
  #
  # A worker is started for a post when no idle worker is left for it (the
  # queue holds as many tasks as workers wait on it) and fewer than
  # max_threads exist; otherwise the task waits in the queue, up to
  # max_queue tasks (0: unbounded), beyond which the fallback policy
  # applies, as it does after shutdown. Workers wait untimed; a reaper
  # (#reap) ends those idle for a whole idletime window, so a worker idle
  # for idletime seconds ends within twice that. An exception in a task (any Exception, as a Thread#raise aimed at
  # the worker) goes to on_error if given, or is dropped; the worker goes
  # on. A worker killed mid-task is replaced at once while the executor
  # runs. After fork the child's executor has no workers and an empty queue.
  #
  # Everything that reads or changes the pool's counts holds @lock (`ns_`:
  # the lock is held); tasks run, and fallbacks apply, without it.
  class Executor
    FALLBACK_POLICIES = %i[abort discard caller_runs].freeze
    # The job the reaper queues for each worker it ends.
    STOP = Object.new.freeze
    private_constant :STOP
    # concurrent-ruby's DEFAULT_MAX_POOL_SIZE: a cached pool.
    DEFAULT_MAX_THREADS = 2_147_483_647
    DEFAULT_IDLETIME = 60

    attr_reader :max_length, :max_queue, :idletime, :fallback_policy

    def initialize(max_threads: DEFAULT_MAX_THREADS, max_queue: 0, idletime: DEFAULT_IDLETIME,
                   fallback_policy: :abort, on_error: nil)
      @max_length = Integer(max_threads)
      @max_queue = Integer(max_queue)
      @idletime = idletime
      raise ArgumentError, "max_threads must be between 1 and #{DEFAULT_MAX_THREADS}" unless
        @max_length.between?(1, DEFAULT_MAX_THREADS)
      raise ArgumentError, "max_queue must not be negative" if @max_queue.negative?
      raise ArgumentError, "idletime must be a positive number of seconds" unless
        idletime.is_a?(Numeric) && idletime.positive?
      raise ArgumentError, "#{fallback_policy} is not a valid fallback policy" unless
        FALLBACK_POLICIES.include?(fallback_policy)
      raise ArgumentError, "on_error must respond to call" unless on_error.nil? || on_error.respond_to?(:call)

      @fallback_policy = fallback_policy
      @on_error = on_error
      @lock = Thread::Mutex.new
      @terminated = RapidThread::ConditionVariable.new
      @reaper_wake = RapidThread::ConditionVariable.new
      ns_start_fresh(:running)
    end

    # Runs the block with args on a worker. True when accepted; otherwise
    # (shut down, or the queue full) the fallback policy's answer: :abort
    # raises, :discard returns false, :caller_runs runs the block here.
    def post(*args, &task)
      raise ArgumentError, "no block given" unless task

      job = args.empty? ? task : [task, args]
      if @max_queue.zero? && @workers.positive? && @state == :running && @fork_gen == RapidThread.__fork_generation
        # The unbounded queue's path, without the lock, while workers
        # exist: push, then look for a worker. A worker leaves only after
        # it has counted itself out of @workers and then found the queue
        # empty (#ns_leave?), and a shutdown drains what was pushed
        # (#ns_drain): whichever comes second sees the other's change.
        # (A worker that cannot be made here, out of threads or at exit,
        # leaves the job to the next one made.)
        queue = @queue
        begin
          queue.push(job)
        rescue ClosedQueueError
          return fallback(task, args) # shut down meanwhile
        end
        if queue.size > queue.num_waiting + @starting && @workers < @max_length
          begin
            @lock.synchronize { ns_add_worker if ns_worker_wanted? }
          rescue ThreadError
            nil
          end
        end
        return true
      end
      accepted = synchronize { @state == :running && ns_enqueue(job) }
      accepted || fallback(task, args)
    end

    def <<(task)
      post(&task)
      self
    end

    # Finishes what is queued and running, and accepts nothing new.
    def shutdown
      synchronize do
        next unless @state == :running

        @state = :shuttingdown
        @queue.close
        @reaper_wake.signal
        ns_drain
      end
      true
    end

    # Drops what is queued and kills the tasks running (as concurrent-ruby's
    # thread pools do): shut down at once. A task a worker has taken but
    # not yet begun may be dropped with its worker, as a queued one is. A
    # task that kills its own executor is killed last.
    def kill
      doomed = synchronize do
        next [] if @state == :shutdown

        @queue.clear
        @queue.close
        @stops = 0
        @reaper_wake.signal
        workers = @tasks.values
        @completed += workers.sum { |me| me[2] }
        @tasks.clear
        @workers = 0
        @starting = 0
        ns_terminated
        workers
      end
      doomed.sort_by { |_, thread| thread.equal?(Thread.current) ? 1 : 0 }.each { |task, *| task.kill }
      true
    end

    # Waits until shut down (all workers ended); false if timeout seconds
    # passed first (nil: no limit).
    def wait_for_termination(timeout = nil)
      deadline = timeout && now + timeout
      synchronize do
        until @state == :shutdown
          left = deadline && deadline - now
          break false if left && left <= 0

          @terminated.wait(@lock, left)
        end
        @state == :shutdown
      end
    end

    def running?
      synchronize { @state == :running }
    end

    def shuttingdown?
      synchronize { @state == :shuttingdown }
    end

    def shutdown?
      synchronize { @state == :shutdown }
    end

    # Whether tasks can be refused for a full queue.
    def can_overflow?
      @max_queue != 0
    end

    def serialized?
      false
    end

    # Tasks posted that no worker has taken yet.
    def queue_length
      synchronize { [ns_jobs_queued, 0].max }
    end

    # Workers, busy and idle.
    def length
      synchronize { @workers }
    end

    def largest_length
      synchronize { @largest_length }
    end

    # Tasks that ran to their end, normally or with an exception (not
    # killed ones).
    def completed_task_count
      synchronize { @completed + @tasks.each_value.sum { |me| me[2] } }
    end

    private

    def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

    def synchronize
      @lock.synchronize do
        ns_forget_parent if @fork_gen != RapidThread.__fork_generation
        yield
      end
    end

    def ns_start_fresh(state)
      @state = state
      @fork_gen = RapidThread.__fork_generation
      # A burst of posts wakes one idle worker, which wakes the next only
      # if jobs are left when it takes one (chained wake-ups, queue.rs).
      @queue = RapidThread::Queue.new.__send__(:__chain_wakeups!)
      @tasks = {}.compare_by_identity # a worker's Task => its `me` (see #work)
      @workers = 0
      # Workers spawned that have not reached the queue yet: each will take
      # a job (the thread cache may not start them at once).
      @starting = 0
      @largest_length = 0
      @completed = 0
      # STOP jobs queued and not yet taken, and the running reaper's token
      # (nil when none runs).
      @stops = 0
      @reaper = nil
    end

    # A forked child: the parent's workers do not exist here.
    def ns_forget_parent
      ns_start_fresh(@state == :running ? :running : :shutdown)
    end

    # Queues the job, with a new worker for it when no idle one is left;
    # false when it can take no more.
    def ns_enqueue(job)
      waiting = @queue.num_waiting + @starting
      queued = ns_jobs_queued
      if queued >= waiting
        if @workers < @max_length
          begin
            ns_add_worker
          rescue ThreadError
            # No thread could be made: a worker there takes it in turn.
            return false if @workers.zero?
          end
        elsif @max_queue.positive? && queued - waiting >= @max_queue
          return false
        end
      end
      @queue.push(job)
      true
    end

    # Jobs queued: the queue less its STOPs, which it holds or workers have
    # taken and not yet counted out (then this reads low by those, even
    # below 0).
    def ns_jobs_queued
      @queue.size - @stops
    end

    # Whether a job queued wants a worker that is not there: more jobs
    # than workers idle or on their way, and room for one more.
    def ns_worker_wanted?
      @state != :shutdown && ns_jobs_queued > @queue.num_waiting + @starting && @workers < @max_length
    end

    # Shutting down with no worker left: done once nothing is queued;
    # otherwise a worker drains it (a post pushed it, or a worker was
    # killed with jobs queued behind it).
    def ns_drain
      return unless @state == :shuttingdown && @workers.zero?
      return ns_terminated if @queue.empty?

      ns_add_worker
    rescue ThreadError
      ns_terminated # the process is ending: nothing can run them
    end

    # An idle worker's way out, unless a job came: counted out first, then
    # the queue looked at (see #post). Queued STOPs are not jobs: with them
    # counted, one worker took every STOP of a look and the others stayed.
    # (A STOP another worker has taken but not yet counted out makes this
    # one leave with a job queued; that worker, counting out, finds it.)
    def ns_leave?(me)
      return true unless @tasks.key?(me[0]) # kill counted it out

      @workers -= 1
      if ns_jobs_queued.positive?
        @workers += 1
        return false
      end
      @tasks.delete(me[0])
      @completed += me[2]
      ns_drain
      true
    end

    def ns_add_worker
      # Its Task, thread, completed count, whether it waits for a job, and
      # the count at the reaper's last look (-1: not looked at yet).
      me = [nil, nil, 0, false, -1]
      task = RapidThread.spawn(me) { |m| work(m) }
      me[0] = task
      @tasks[task] = me
      @workers += 1
      @starting += 1
      @largest_length = @workers if @workers > @largest_length
      ns_start_reaper
    end

    def ns_start_reaper
      return if @reaper

      token = @reaper = [] # the reaper's mark; it adds its thread (for tests)
      RapidThread.spawn { reap(token) }
    rescue ThreadError
      @reaper = nil # the process is ending: idle workers end with it
    end

    # Every idletime, a STOP job for each worker that waited for a job
    # through the whole window: it is waiting now and completed nothing
    # since the last look (one that took a job would be running it, or
    # would have counted it). Whichever idle worker takes a STOP leaves,
    # unless jobs are queued. Ends at a look that finds no worker, or at
    # shutdown, letting go of @reaper under the lock that decided so; one
    # killed anywhere else (a stray Thread#kill) lets go in its ensure and
    # starts another while workers remain. `token`: its mark in @reaper.
    def reap(token)
      ended = false
      token << Thread.current
      @lock.synchronize do
        while @state == :running && @workers.positive? && @reaper.equal?(token)
          deadline = now + @idletime
          while @state == :running && (left = deadline - now).positive?
            @reaper_wake.wait(@lock, left)
          end
          break unless @state == :running

          # (A kill between counting STOPs and queueing them would leave
          # @stops wrong for good.)
          Thread.handle_interrupt(Object => :never) { ns_stop_idle_workers }
        end
        @reaper = nil if @reaper.equal?(token)
        ended = true
      end
    ensure
      unless ended
        Thread.handle_interrupt(Object => :never) do
          synchronize do
            if @reaper.equal?(token)
              @reaper = nil
              ns_start_reaper if @state == :running && @workers.positive?
            end
          end
        end
      end
    end

    # Counts the idle workers first, then queues their STOPs: a push can
    # let a woken worker take its STOP at once, and a look that pushed as
    # it went passed over that worker (no longer waiting), one STOP short.
    def ns_stop_idle_workers
      idle = 0
      @tasks.each_value do |w|
        idle += 1 if w[3] && w[2] == w[4]
        w[4] = w[2]
      end
      @stops += idle
      idle.times { @queue.push(STOP) }
    end

    # A worker's loop. `me`: its Task (set before the loop can look), its
    # thread, the tasks it completed (only it writes that count), whether
    # it waits for a job, and the reaper's mark (see #ns_add_worker).
    def work(me)
      gen = RapidThread.__fork_generation
      @lock.synchronize do
        me[1] = Thread.current
        @starting -= 1 if @tasks.key?(me[0]) # (kill counted it out)
      end
      leaving = false
      until leaving
        job = nil
        counted = false
        begin
          me[3] = true
          job = @queue.pop
          me[3] = false
          if job.nil? || job.equal?(STOP)
            # Reaped, or shut down and drained: leave unless work came.
            Thread.handle_interrupt(Object => :never) do
              @lock.synchronize do
                ns_forget_stop(me) if job
                job = nil
                leaving = ns_leave?(me)
              end
            end
          else
            job.is_a?(Proc) ? job.call : job[0].call(*job[1])
            me[2] += 1
            counted = true
          end
        rescue Exception => e # rubocop:disable Lint/RescueException
          # The task's, or a Thread#raise aimed at the worker (one that
          # landed between taking a STOP and counting it out keeps the
          # worker, and the STOP is forgotten).
          if job.equal?(STOP)
            Thread.handle_interrupt(Object => :never) do
              @lock.synchronize do
                ns_forget_stop(me)
                job = nil # (an interrupt deferred to here must not count it again)
              end
            end
          end
          me[2] += 1 if job && !counted
          report(e)
        end
        # A task forked and this is the child: the loop is the parent's.
        leaving ||= RapidThread.__fork_generation != gen
      end
    ensure
      # Deferred interrupts: a second kill must not skip the count.
      Thread.handle_interrupt(Object => :never) do
        synchronize do
          ns_forget_stop(me) if job.equal?(STOP) # killed holding one
          ns_worker_ended(me[0], replace: !leaving)
        end
      end
    end

    # A STOP this worker took is no longer queued (kill, which cleared the
    # queue and the count, counted the worker out).
    def ns_forget_stop(me)
      @stops -= 1 if @tasks.key?(me[0])
    end

    def report(error)
      @on_error&.call(error)
    rescue Exception # rubocop:disable Lint/RescueException
      nil # an on_error that fails must not end the worker either
    end

    # A worker ended (killed, or by an error outside a task, or having
    # left: #ns_leave? counted that one out already); one that did not
    # mean to is replaced while the pool runs.
    def ns_worker_ended(task, replace:)
      me = @tasks.delete(task)
      return unless me # kill already counted it out

      @completed += me[2]
      @workers -= 1
      begin
        ns_add_worker if replace && @state == :running
      rescue ThreadError
        nil # the process is ending (or out of threads): the next post adds one
      end
      ns_drain
    end

    def ns_terminated
      @state = :shutdown
      @terminated.broadcast
    end

    # Shut down, or the queue full: concurrent-ruby's fallbacks (its
    # :caller_runs also drops a StandardError the task raised).
    def fallback(task, args)
      case @fallback_policy
      when :abort
        raise defined?(::Concurrent::RejectedExecutionError) ? ::Concurrent::RejectedExecutionError : RejectedExecutionError
      when :discard
        false
      else # :caller_runs
        begin
          task.call(*args)
        rescue StandardError => e
          report(e)
        end
        true
      end
    end
  end
end
