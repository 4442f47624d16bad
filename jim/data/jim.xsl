<?xml version="1.0" encoding="UTF-8"?>
<!-- Renders a jim grid job record (db/<id>.xml) as a page in a browser.
     XSLT 1.0 (what browsers implement); every value goes through xsl:value-of,
     which escapes it, and disable-output-escaping is never used. -->
<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:output method="html" encoding="UTF-8" indent="yes" doctype-system="about:legacy-compat"/>

  <xsl:template match="/gridjob">
    <html lang="en">
      <head>
        <meta charset="utf-8"/>
        <title>jim grid job <xsl:value-of select="@id"/> (<xsl:value-of select="@state"/>)</title>
        <style>
          body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
          h1 { font-size: 1.3em; margin-bottom: .2em; }
          .state { display: inline-block; padding: .1em .5em; border-radius: .3em; font-weight: bold; color: #fff; background: #777; }
          .s-DONE { background: #2e7d32; } .s-FAILED, .s-LOST { background: #c62828; } .s-CANCELLED { background: #6d4c41; }
          .s-ACTIVE, .s-RUNNING { background: #1565c0; } .s-PENDING, .s-QUEUED, .s-PLANNED, .s-SUBMITTING { background: #757575; }
          .s-SUSPENDED, .s-HELD { background: #ef6c00; }
          table { border-collapse: collapse; margin-top: .8em; font-size: .9em; }
          th, td { border: 1px solid #ccc; padding: .25em .5em; text-align: left; vertical-align: top; }
          th { background: #f3f3f3; }
          dl { display: grid; grid-template-columns: max-content auto; gap: .2em 1em; }
          dt { font-weight: bold; } dd { margin: 0; }
          .bar { width: 12em; height: .9em; background: #e0e0e0; border-radius: .2em; overflow: hidden; display: inline-block; vertical-align: middle; }
          .fill { height: 100%; background: #1565c0; }
          .phase { white-space: nowrap; }
          code { font-size: .95em; }
        </style>
      </head>
      <body>
        <h1>Grid job <code><xsl:value-of select="@id"/></code></h1>
        <p>
          <span class="state s-{@state}" id="grid-state"><xsl:value-of select="@state"/></span>
          <xsl:if test="@exitCode"> exit code <b id="grid-exit"><xsl:value-of select="@exitCode"/></b></xsl:if>
          — <span id="jobname"><xsl:value-of select="@name"/></span>
        </p>
        <dl>
          <dt>Job type</dt><dd><xsl:value-of select="@jobtype"/></dd>
          <dt>Owner</dt><dd><xsl:value-of select="@owner"/></dd>
          <dt>Batch system</dt><dd><xsl:value-of select="@adapter"/></dd>
          <dt>Created</dt><dd><xsl:value-of select="@created"/></dd>
          <dt>Updated</dt><dd><xsl:value-of select="@updated"/></dd>
          <dt>Local jobs</dt><dd id="local-count"><xsl:value-of select="count(localjobs/localjob)"/></dd>
          <dt>Plan</dt><dd id="plan"><xsl:value-of select="plan/explanation"/> (binding: <xsl:value-of select="plan/@binding"/>)</dd>
          <xsl:if test="outputs/@tar"><dt>Output tar</dt><dd><xsl:value-of select="outputs/@tar"/></dd></xsl:if>
        </dl>
        <h2>Local jobs</h2>
        <table id="localjobs">
          <tr><th>#</th><th>State</th><th>Batch id</th><th>Slice</th><th>Submitted</th><th>Started</th><th>Ended</th><th>Exit</th><th>Evidence</th><th>Progress</th></tr>
          <xsl:for-each select="localjobs/localjob">
            <tr class="localjob">
              <td><xsl:value-of select="@index"/></td>
              <td><span class="state s-{@state}"><xsl:value-of select="@state"/></span>
                  <xsl:if test="@reason"><br/><small><xsl:value-of select="@reason"/></small></xsl:if></td>
              <td><xsl:value-of select="@batchId"/></td>
              <td><xsl:for-each select="slice/@*"><xsl:value-of select="name()"/>=<xsl:value-of select="."/><xsl:text> </xsl:text></xsl:for-each>
                  <xsl:for-each select="slice/param"><xsl:value-of select="@name"/>=<xsl:value-of select="@value"/><xsl:text> </xsl:text></xsl:for-each></td>
              <td><xsl:value-of select="@submitted"/></td>
              <td><xsl:value-of select="@started"/></td>
              <td><xsl:value-of select="@ended"/></td>
              <td><xsl:value-of select="@exitCode"/></td>
              <td><xsl:value-of select="@evidence"/></td>
              <td>
                <xsl:for-each select="progress/phase">
                  <div class="phase">
                    <xsl:value-of select="@name"/>: <xsl:value-of select="@done"/> of <xsl:value-of select="@total"/>
                    <xsl:text> </xsl:text>
                    <span class="bar"><span class="fill">
                      <xsl:attribute name="style">display:block;width:<xsl:choose>
                        <xsl:when test="@total &gt; 0"><xsl:value-of select="floor(100 * @done div @total)"/></xsl:when>
                        <xsl:otherwise>0</xsl:otherwise></xsl:choose>%</xsl:attribute>
                    </span></span>
                  </div>
                </xsl:for-each>
              </td>
            </tr>
          </xsl:for-each>
        </table>
      </body>
    </html>
  </xsl:template>

  <xsl:template match="/index">
    <html lang="en">
      <head><meta charset="utf-8"/><title>jim grid jobs</title></head>
      <body>
        <h1>Grid jobs</h1>
        <table>
          <tr><th>Id</th><th>State</th><th>Type</th><th>Name</th><th>Local jobs</th><th>Created</th></tr>
          <xsl:for-each select="job">
            <xsl:sort select="@created" order="descending"/>
            <tr><td><a href="{@id}.xml"><xsl:value-of select="@id"/></a></td><td><xsl:value-of select="@state"/></td>
                <td><xsl:value-of select="@jobtype"/></td><td><xsl:value-of select="@name"/></td>
                <td><xsl:value-of select="@localJobs"/></td><td><xsl:value-of select="@created"/></td></tr>
          </xsl:for-each>
        </table>
      </body>
    </html>
  </xsl:template>
</xsl:stylesheet>
