<?xml version="1.0" encoding="UTF-8"?>
<!-- Renders jim's XML database in a browser: a grid job record (db/<id>.xml) as a page
     with its grid state, plan, description, counts per local state, progress per phase
     and a row per local job; the index (db/index.xml, as jim serve hands it out) as a list.

     XSLT 1.0, what browsers implement.  Every value goes through xsl:value-of or an
     attribute value template, which escape it: disable-output-escaping is never used,
     so a job name full of <script> is shown as text.  No script in the output.
     The page of a grid job that is not DONE or FAILED reloads itself every 5 s. -->
<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:output method="html" encoding="UTF-8" indent="yes" doctype-system="about:legacy-compat"/>

  <!-- the reported phases of all local jobs, grouped by name (Muenchian grouping) -->
  <xsl:key name="phase" match="/gridjob/localjobs/localjob/progress/phase" use="@name"/>

  <xsl:template name="style">
    <style>
      body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
      h1 { font-size: 1.3em; margin-bottom: .2em; } h2 { font-size: 1.1em; margin-top: 1.4em; }
      .muted { color: #666; } .warn { color: #b71c1c; font-weight: bold; }
      .state { display: inline-block; padding: .05em .45em; border-radius: .3em; font-weight: bold; font-size: .9em; color: #fff; background: #777; }
      .s-DONE { background: #2e7d32; } .s-FAILED, .s-LOST { background: #c62828; } .s-CANCELLED { background: #6d4c41; }
      .s-ACTIVE, .s-RUNNING { background: #1565c0; } .s-PENDING, .s-QUEUED, .s-PLANNED, .s-SUBMITTING, .s-UNSUBMITTED { background: #757575; }
      .s-SUSPENDED, .s-HELD { background: #ef6c00; }
      table { border-collapse: collapse; margin-top: .6em; font-size: .9em; }
      th, td { border: 1px solid #d0d0d0; padding: .25em .5em; text-align: left; vertical-align: top; }
      th { background: #f3f3f3; } td.num { text-align: right; }
      dl { display: grid; grid-template-columns: max-content auto; gap: .2em 1em; }
      dt { font-weight: bold; } dd { margin: 0; overflow-wrap: anywhere; }
      progress { width: 10em; height: .9em; vertical-align: middle; }
      table.progress progress { width: 16em; }
      .phase { white-space: nowrap; } .reason { color: #b71c1c; }
      .count { margin-right: .8em; white-space: nowrap; }
      pre { background: #f6f8fa; padding: .6em; white-space: pre-wrap; overflow-wrap: anywhere; }
      code { font-size: .95em; }
      tr.attempts > td { background: #fafafa; } table.attempts { margin: 0; font-size: .95em; }
      tr.current td { font-weight: bold; } small.attempt { color: #666; white-space: nowrap; }
    </style>
  </xsl:template>

  <!-- a bar: <progress> with done (at most total) of total -->
  <xsl:template name="bar">
    <xsl:param name="done"/>
    <xsl:param name="total"/>
    <progress>
      <xsl:attribute name="max"><xsl:choose><xsl:when test="$total &gt; 0"><xsl:value-of select="$total"/></xsl:when><xsl:otherwise>1</xsl:otherwise></xsl:choose></xsl:attribute>
      <xsl:attribute name="value"><xsl:choose><xsl:when test="$done &gt; $total"><xsl:value-of select="$total"/></xsl:when><xsl:otherwise><xsl:value-of select="$done"/></xsl:otherwise></xsl:choose></xsl:attribute>
      <xsl:value-of select="$done"/>/<xsl:value-of select="$total"/>
    </progress>
    <xsl:if test="$total &gt; 0">
      <xsl:text> </xsl:text><xsl:value-of select="format-number(100 * $done div $total, '0.0')"/>%</xsl:if>
  </xsl:template>

  <!-- "3 RUNNING" when any local job is in that state -->
  <xsl:template name="state-count">
    <xsl:param name="state"/>
    <xsl:variable name="n" select="count(/gridjob/localjobs/localjob[@state = $state])"/>
    <xsl:if test="$n &gt; 0">
      <span class="count" data-state="{$state}"><xsl:value-of select="$n"/><xsl:text> </xsl:text><span class="state s-{$state}"><xsl:value-of select="$state"/></span></span>
    </xsl:if>
  </xsl:template>

  <xsl:template match="/gridjob">
    <xsl:variable name="jobs" select="localjobs/localjob"/>
    <xsl:variable name="phases" select="localjobs/localjob/progress/phase"/>
    <xsl:variable name="done" select="sum($phases[number(@done) &lt;= number(@total)]/@done) + sum($phases[number(@done) &gt; number(@total)]/@total)"/>
    <xsl:variable name="total" select="sum($phases/@total)"/>
    <xsl:variable name="ended" select="count($jobs[@state = 'DONE' or @state = 'FAILED' or @state = 'CANCELLED' or @state = 'LOST'])"/>
    <html lang="en">
      <head>
        <meta charset="utf-8"/>
        <xsl:if test="@state != 'DONE' and @state != 'FAILED'">
          <meta http-equiv="refresh" content="5"/>
        </xsl:if>
        <title>jim grid job <xsl:value-of select="@id"/> (<xsl:value-of select="@state"/>)</title>
        <xsl:call-template name="style"/>
      </head>
      <body>
        <h1>Grid job <code id="job-id"><xsl:value-of select="@id"/></code></h1>
        <p>
          <span class="state s-{@state}" id="grid-state"><xsl:value-of select="@state"/></span>
          <xsl:if test="@exitCode"> exit code <b id="grid-exit"><xsl:value-of select="@exitCode"/></b></xsl:if>
          <xsl:if test="@cancelRequested = 'true'"><xsl:text> </xsl:text><span class="warn">cancel requested</span></xsl:if>
          — <span id="jobname"><xsl:value-of select="@name"/></span>
        </p>
        <p class="muted" id="refresh-note">
          <xsl:choose>
            <xsl:when test="@state != 'DONE' and @state != 'FAILED'">The grid job is still <xsl:value-of select="@state"/>: this page reloads every 5 s.</xsl:when>
            <xsl:otherwise>The grid job has ended.</xsl:otherwise>
          </xsl:choose>
          Updated <xsl:value-of select="@updated"/>.
        </p>
        <dl>
          <dt>Job type</dt><dd id="jobtype"><xsl:value-of select="@jobtype"/></dd>
          <dt>Owner</dt><dd><xsl:value-of select="@owner"/></dd>
          <dt>Batch system</dt><dd><xsl:value-of select="@adapter"/></dd>
          <dt>Created</dt><dd><xsl:value-of select="@created"/></dd>
          <dt>Local jobs</dt><dd id="local-count"><xsl:value-of select="count($jobs)"/></dd>
          <dt>Plan</dt><dd id="plan"><xsl:value-of select="plan/explanation"/> <span class="muted"> (binding: <xsl:value-of select="plan/@binding"/>)</span></dd>
          <dt>Herd state</dt><dd><xsl:value-of select="@HerdState"/></dd>
          <xsl:if test="$jobs/attempts/attempt">
            <dt>Retries</dt><dd id="retries"><xsl:value-of select="count($jobs/attempts/attempt)"/>
              (<xsl:value-of select="count($jobs[attempts/attempt])"/> local jobs tried more than once)</dd>
          </xsl:if>
          <xsl:if test="outputs/@tar"><dt>Output tar</dt><dd id="output-tar"><code><xsl:value-of select="outputs/@tar"/></code></dd></xsl:if>
        </dl>

        <h2>Progress</h2>
        <table class="progress" id="progress">
          <tr class="overall">
            <th>all phases</th>
            <td class="num" id="overall-count">
              <xsl:choose>
                <xsl:when test="$total &gt; 0"><xsl:value-of select="$done"/> of <xsl:value-of select="$total"/></xsl:when>
                <xsl:otherwise>none reported</xsl:otherwise>
              </xsl:choose>
            </td>
            <td><xsl:call-template name="bar"><xsl:with-param name="done" select="$done"/><xsl:with-param name="total" select="$total"/></xsl:call-template></td>
          </tr>
          <xsl:for-each select="$phases[generate-id() = generate-id(key('phase', @name)[1])]">
            <xsl:variable name="group" select="key('phase', @name)"/>
            <xsl:variable name="gdone" select="sum($group[number(@done) &lt;= number(@total)]/@done) + sum($group[number(@done) &gt; number(@total)]/@total)"/>
            <xsl:variable name="gtotal" select="sum($group/@total)"/>
            <tr class="phase-total">
              <th><xsl:value-of select="@name"/></th>
              <td class="num"><xsl:value-of select="$gdone"/> of <xsl:value-of select="$gtotal"/></td>
              <td><xsl:call-template name="bar"><xsl:with-param name="done" select="$gdone"/><xsl:with-param name="total" select="$gtotal"/></xsl:call-template>
                <span class="muted"><xsl:text> </xsl:text><xsl:value-of select="count($group)"/> of <xsl:value-of select="count($jobs)"/> local jobs reporting</span></td>
            </tr>
          </xsl:for-each>
          <tr class="ended">
            <th>local jobs ended</th>
            <td class="num" id="ended-count"><xsl:value-of select="$ended"/> of <xsl:value-of select="count($jobs)"/></td>
            <td><xsl:call-template name="bar"><xsl:with-param name="done" select="$ended"/><xsl:with-param name="total" select="count($jobs)"/></xsl:call-template></td>
          </tr>
        </table>

        <h2>Local jobs</h2>
        <p id="counts">
          <xsl:call-template name="state-count"><xsl:with-param name="state" select="'FAILED'"/></xsl:call-template>
          <xsl:call-template name="state-count"><xsl:with-param name="state" select="'LOST'"/></xsl:call-template>
          <xsl:call-template name="state-count"><xsl:with-param name="state" select="'CANCELLED'"/></xsl:call-template>
          <xsl:call-template name="state-count"><xsl:with-param name="state" select="'HELD'"/></xsl:call-template>
          <xsl:call-template name="state-count"><xsl:with-param name="state" select="'SUSPENDED'"/></xsl:call-template>
          <xsl:call-template name="state-count"><xsl:with-param name="state" select="'RUNNING'"/></xsl:call-template>
          <xsl:call-template name="state-count"><xsl:with-param name="state" select="'QUEUED'"/></xsl:call-template>
          <xsl:call-template name="state-count"><xsl:with-param name="state" select="'SUBMITTING'"/></xsl:call-template>
          <xsl:call-template name="state-count"><xsl:with-param name="state" select="'PLANNED'"/></xsl:call-template>
          <xsl:call-template name="state-count"><xsl:with-param name="state" select="'DONE'"/></xsl:call-template>
        </p>
        <table id="localjobs">
          <tr><th>#</th><th>State</th><th>Batch id</th><th>Slice</th><th>Submitted</th><th>Started</th><th>Ended</th><th>Exit</th><th>Evidence</th><th>Progress</th></tr>
          <xsl:for-each select="$jobs">
            <tr class="localjob" id="lj-{@index}">
              <td class="num"><xsl:value-of select="@index"/>
                  <xsl:if test="@attempt &gt; 1"><br/><small class="attempt">attempt <xsl:value-of select="@attempt"/></small></xsl:if></td>
              <td><span class="state s-{@state}"><xsl:value-of select="@state"/></span>
                  <xsl:if test="@reason"><br/><small class="reason"><xsl:value-of select="@reason"/></small></xsl:if></td>
              <td><code><xsl:value-of select="@batchId"/></code>
                  <xsl:if test="@host"><br/><small><xsl:value-of select="@host"/></small></xsl:if></td>
              <td><xsl:for-each select="slice/@*"><xsl:value-of select="name()"/>=<xsl:value-of select="."/><xsl:text> </xsl:text></xsl:for-each>
                  <xsl:for-each select="slice/param"><xsl:value-of select="@name"/>=<xsl:value-of select="@value"/><xsl:text> </xsl:text></xsl:for-each></td>
              <td><xsl:value-of select="@submitted"/></td>
              <td><xsl:value-of select="@started"/></td>
              <td><xsl:value-of select="@ended"/></td>
              <td class="num"><xsl:value-of select="@exitCode"/></td>
              <td><xsl:value-of select="@evidence"/></td>
              <td class="phases">
                <xsl:for-each select="progress/phase">
                  <div class="phase">
                    <span class="pname"><xsl:value-of select="@name"/></span>: <span class="pcount"><xsl:value-of select="@done"/> of <xsl:value-of select="@total"/></span>
                    <xsl:text> </xsl:text>
                    <xsl:call-template name="bar"><xsl:with-param name="done" select="number(@done)"/><xsl:with-param name="total" select="number(@total)"/></xsl:call-template>
                  </div>
                </xsl:for-each>
              </td>
            </tr>
            <xsl:if test="attempts/attempt">
              <tr class="attempts" id="lj-{@index}-attempts">
                <td></td>
                <td colspan="9"><xsl:apply-templates select="." mode="attempts"/></td>
              </tr>
            </xsl:if>
          </xsl:for-each>
        </table>

        <h2>Description</h2>
        <table id="description">
          <xsl:for-each select="description/attribute">
            <tr><th><xsl:value-of select="@name"/></th>
              <td><xsl:for-each select="*">
                    <xsl:choose>
                      <xsl:when test="self::list"><span class="value">(<xsl:for-each select="value"><xsl:value-of select="."/><xsl:if test="position() != last()"><xsl:text> </xsl:text></xsl:if></xsl:for-each>)</span></xsl:when>
                      <xsl:otherwise><span class="value"><xsl:value-of select="."/></span></xsl:otherwise>
                    </xsl:choose>
                    <xsl:if test="position() != last()"><xsl:text> </xsl:text></xsl:if>
                  </xsl:for-each></td></tr>
          </xsl:for-each>
        </table>
        <p class="muted">As submitted (<xsl:value-of select="description/@format"/>):</p>
        <pre id="source"><xsl:value-of select="description/source"/></pre>

        <h2>Grid state history</h2>
        <ol>
          <xsl:for-each select="history/grid">
            <li><span class="state s-{@state}"><xsl:value-of select="@state"/></span><xsl:text> </xsl:text><xsl:value-of select="@at"/></li>
          </xsl:for-each>
        </ol>
      </body>
    </html>
  </xsl:template>

  <!-- every attempt of a local job, oldest first: its <attempt> elements, then the current one
       (the local job's own attributes) -->
  <xsl:template match="localjob" mode="attempts">
    <table class="attempts">
      <tr><th>Attempt</th><th>State</th><th>Exit</th><th>Batch id</th><th>Node</th><th>Ended</th><th>Evidence / cause</th><th>Reason</th><th>Next attempt because</th><th>Asked by</th></tr>
      <xsl:for-each select="attempts/attempt">
        <tr class="attempt">
          <td class="num"><xsl:value-of select="@n"/></td>
          <xsl:call-template name="attempt-cells"/>
          <td class="retry-reason"><xsl:value-of select="@retryReason"/><br/><small class="muted"><xsl:value-of select="@retryAt"/></small></td>
          <td class="retry-by"><xsl:choose>
            <xsl:when test="@retryBy"><xsl:value-of select="@retryBy"/></xsl:when>
            <xsl:otherwise><span class="muted">jim</span></xsl:otherwise>
          </xsl:choose></td>
        </tr>
      </xsl:for-each>
      <tr class="attempt current">
        <td class="num"><xsl:choose><xsl:when test="@attempt"><xsl:value-of select="@attempt"/></xsl:when><xsl:otherwise>1</xsl:otherwise></xsl:choose></td>
        <xsl:call-template name="attempt-cells"/>
        <td colspan="2" class="muted">current attempt<xsl:if test="@retryAfter and @state = 'PLANNED'">: waits for its cool-off until <xsl:value-of select="@retryAfter"/></xsl:if></td>
      </tr>
    </table>
  </xsl:template>

  <!-- the cells an attempt and a local job's current attempt have in common -->
  <xsl:template name="attempt-cells">
    <td><span class="state s-{@state}"><xsl:value-of select="@state"/></span></td>
    <td class="num"><xsl:value-of select="@exitCode"/></td>
    <td><code><xsl:value-of select="@batchId"/></code></td>
    <td><xsl:choose><xsl:when test="@node"><xsl:value-of select="@node"/></xsl:when><xsl:otherwise><xsl:value-of select="@host"/></xsl:otherwise></xsl:choose></td>
    <td><xsl:value-of select="@ended"/></td>
    <td><xsl:value-of select="@evidence"/><xsl:if test="@cause"><br/><small><xsl:value-of select="@cause"/></small></xsl:if></td>
    <td><span class="reason"><xsl:value-of select="@reason"/></span><xsl:if test="@killedBy"><br/><small>killed by <xsl:value-of select="@killedBy"/></small></xsl:if></td>
  </xsl:template>

  <xsl:template match="/index">
    <html lang="en">
      <head>
        <meta charset="utf-8"/>
        <title>jim grid jobs</title>
        <xsl:call-template name="style"/>
      </head>
      <body>
        <h1>Grid jobs</h1>
        <p class="muted"><span id="total"><xsl:value-of select="count(job)"/></span> grid jobs, newest first.</p>
        <table id="gridjobs">
          <tr><th>Id</th><th>State</th><th>Type</th><th>Name</th><th>Local jobs</th><th>Owner</th><th>Created</th><th>Updated</th></tr>
          <xsl:for-each select="job">
            <xsl:sort select="@created" order="descending"/>
            <tr class="gridjob">
              <td><a href="{@id}.xml"><code><xsl:value-of select="@id"/></code></a></td>
              <td><span class="state s-{@state}"><xsl:value-of select="@state"/></span></td>
              <td><xsl:value-of select="@jobtype"/></td>
              <td><xsl:value-of select="@name"/></td>
              <td class="num"><xsl:value-of select="@localJobs"/></td>
              <td><xsl:value-of select="@owner"/></td>
              <td><xsl:value-of select="@created"/></td>
              <td><xsl:value-of select="@updated"/></td>
            </tr>
          </xsl:for-each>
        </table>
      </body>
    </html>
  </xsl:template>
</xsl:stylesheet>
